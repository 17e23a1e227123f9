module github.com/poplimit/poplimit

go 1.26.0

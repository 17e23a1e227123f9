// Package yamlpos finds the line of a YAML syntax error. go.yaml.in/yaml/v3
// reports a parser error at the line where the enclosing construct began,
// counted from zero ("did not find expected key" one or more lines too
// early); every configuration format of poplimit reports it through Line.
package yamlpos

import (
	"bytes"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

var lineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// Line is the 1-based line of data at which the syntax error err (from
// decoding data into a yaml.Node) appears: the first line whose prefix of
// the document fails with the same error. It is never before the line the
// error names; 0 when err is not a syntax error with a line.
func Line(data []byte, err error) int {
	if err == nil {
		return 0
	}
	m := lineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	reported, _ := strconv.Atoi(m[1])
	want := err.Error()[len(m[0]):]
	ends := lineEnds(data)
	for k := max(reported, 1); k <= len(ends); k++ {
		var n yaml.Node
		perr := yaml.Unmarshal(data[:ends[k-1]], &n)
		if perr == nil {
			continue
		}
		if pm := lineRE.FindStringSubmatch(perr.Error()); pm != nil && perr.Error()[len(pm[0]):] == want {
			return k
		}
	}
	return max(min(reported, len(ends)), 1)
}

// lineEnds are the offsets just past each line of data.
func lineEnds(data []byte) []int {
	var ends []int
	for off := 0; off < len(data); {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			ends = append(ends, len(data))
			break
		}
		off += i + 1
		ends = append(ends, off)
	}
	return ends
}

// Reason is err's message without go.yaml.in/yaml/v3's own line, which
// Line corrects: "yaml: did not find expected key".
func Reason(err error) string {
	s := err.Error()
	if m := lineRE.FindStringSubmatch(s); m != nil {
		return "yaml: " + s[len(m[0]):]
	}
	return s
}

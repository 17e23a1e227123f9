//go:build unix

package pop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// TestAcceptSurvivesEMFILE runs an http.Server over WatchAccept in a child
// process whose RLIMIT_NOFILE leaves room for a few connections, floods it
// with connections until accept fails with EMFILE, and checks that an
// existing keep-alive client is still served, that accepting resumes once
// the flood closes, and that the failures were counted.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	if os.Getenv("POP_EMFILE_CHILD") == "1" {
		emfileChild()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAcceptSurvivesEMFILE$")
	cmd.Env = append(os.Environ(), "POP_EMFILE_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "addr "))
	// One keep-alive client, connected before the flood.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}, Timeout: 5 * time.Second}
	get := func(c *http.Client, path string) (string, error) {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if _, err := get(client, "/"); err != nil {
		t.Fatalf("before the flood: %v", err)
	}
	var flood []net.Conn
	for i := 0; i < 64; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	var errs string
	deadline := time.Now().Add(5 * time.Second)
	for errs == "" || errs == "0" {
		if time.Now().After(deadline) {
			t.Fatalf("accept never failed under the flood (%d connections; errors %q)", len(flood), errs)
		}
		if errs, err = get(client, "/errors"); err != nil {
			t.Fatalf("existing client not served during the flood: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d flood connections, accept errors counted: %s", len(flood), errs)
	for _, c := range flood {
		c.Close()
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	deadline = time.Now().Add(5 * time.Second)
	for {
		if _, err := get(fresh, "/"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no new connection accepted after the flood closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func emfileChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("addr error", err)
		os.Exit(1)
	}
	var errs atomic.Int64
	wl := WatchAccept(ln, AcceptWatch{Count: func(error) { errs.Add(1) }})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, errs.Load())
	}), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	fds, _ := procs.CountFDs(os.Getpid())
	lim := syscall.Rlimit{Cur: uint64(fds + 6), Max: uint64(fds + 6)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("addr error", err)
		os.Exit(1)
	}
	fmt.Println("addr", ln.Addr())
	srv.Serve(wl)
	os.Exit(0)
}

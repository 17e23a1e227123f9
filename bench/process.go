package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotBuilt reports that a command of the module could not be built
// (e.g. it does not exist yet in this checkout).
var ErrNotBuilt = errors.New("bench: command not built")

// ModuleRoot returns the directory of the go.mod of the current module, as
// `go env GOMOD` reports it.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("bench: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("bench: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles ./cmd/<name> of the module into dir/<name> for every name
// and returns the paths by name. The go build cache makes repeated builds
// cheap.
func Build(ctx context.Context, dir string, names ...string) (map[string]string, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		bin := filepath.Join(dir, name)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%w: %s: %v\n%s", ErrNotBuilt, name, err, msg)
		}
		out[name] = bin
	}
	return out, nil
}

// Proc is a child process started by the benchmark. It dies with the
// benchmark (Pdeathsig) even if Stop is never called.
type Proc struct {
	// Name labels it in logs and reports, e.g. "mcproxy-0".
	Name string
	// Addr is the address it serves, when it has one.
	Addr string
	bin  string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProc starts bin with args, output appended to logPath ("" discards).
func StartProc(name, bin string, args []string, logPath string) (*Proc, error) {
	p := &Proc{Name: name, bin: bin, args: args, log: logPath}
	return p, p.start()
}

func (p *Proc) start() error {
	cmd := exec.Command(p.bin, p.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.log != "" {
		f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("bench: %s log: %w", p.Name, err)
		}
		defer f.Close() // the child keeps its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	_, done := p.current()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits up to grace, then kills. Safe to call twice.
func (p *Proc) Stop(grace time.Duration) {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill ends the process with SIGKILL and waits for it.
func (p *Proc) Kill() {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Pause stops the process (SIGSTOP): it keeps its sockets, answers nothing.
func (p *Proc) Pause() error {
	cmd, _ := p.current()
	return cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused process.
func (p *Proc) Resume() error {
	cmd, _ := p.current()
	return cmd.Process.Signal(syscall.SIGCONT)
}

// Restart kills the process and starts it again with the same arguments,
// then waits until ready (if ready is non-nil) answers nil or ctx ends.
func (p *Proc) Restart(ctx context.Context, ready func() error) error {
	p.Kill()
	var err error
	for attempt := 0; attempt < 5; attempt++ { // the port may linger a moment
		if err = p.start(); err != nil {
			return err
		}
		if ready == nil {
			return nil
		}
		if err = p.WaitReady(ctx, 5*time.Second, ready); err == nil {
			return nil
		}
		p.Kill()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return err
}

// Pid returns the current process id.
func (p *Proc) Pid() int {
	cmd, _ := p.current()
	return cmd.Process.Pid
}

// WaitReady polls ready every 20ms until it returns nil, the process exits,
// timeout passes or ctx ends.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	_, done := p.current()
	var err error
	for time.Now().Before(deadline) {
		if err = ready(); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("bench: %s exited at start (log: %s)", p.Name, p.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("bench: %s not ready after %v: %w (log: %s)", p.Name, timeout, err, p.log)
}

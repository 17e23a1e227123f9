package proxycmp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysCounter counts one process's system calls and context switches with
// perf stat (raw_syscalls:sys_enter, context-switches), attached to its
// pid with events disabled; Enable and Disable bracket the timed phase
// through perf's control FIFO, so connection setup is not counted.
type sysCounter struct {
	cmd      *exec.Cmd
	ctl, ack *os.File
	out      string
}

// errNoPerf: perf is not installed, or cannot attach to the process.
var errNoPerf = errors.New("proxycmp: perf stat unavailable (apt-get install -y linux-perf)")

// startSysCounter attaches perf stat to pid; dir holds its FIFOs and
// output (name makes them unique).
func startSysCounter(dir, name string, pid int) (*sysCounter, error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return nil, errNoPerf
	}
	ctlPath, ackPath := filepath.Join(dir, name+".ctl"), filepath.Join(dir, name+".ack")
	for _, p := range []string{ctlPath, ackPath} {
		_ = os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return nil, fmt.Errorf("%w: %v", errNoPerf, err)
		}
	}
	c := &sysCounter{out: filepath.Join(dir, name+".perf")}
	c.cmd = exec.Command("perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter,context-switches",
		"-p", strconv.Itoa(pid), "-D", "-1", "--control", "fifo:"+ctlPath+","+ackPath, "-o", c.out)
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoPerf, err)
	}
	var err error
	// The control FIFO opens (non-blocking) once perf has opened its read
	// end; then the ack FIFO, whose write end perf opens next.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.ctl, err = os.OpenFile(ctlPath, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil || !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			break
		}
	}
	if err == nil {
		c.ack, err = os.OpenFile(ackPath, os.O_RDONLY, 0)
	}
	if err != nil {
		c.kill()
		return nil, fmt.Errorf("%w: %v", errNoPerf, err)
	}
	return c, nil
}

// command sends perf "enable" or "disable" and waits for its ack.
func (c *sysCounter) command(cmd string) error {
	if _, err := c.ctl.WriteString(cmd + "\n"); err != nil {
		return err
	}
	_ = c.ack.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [4]byte // "ack\n"
	if _, err := io.ReadFull(c.ack, b[:]); err != nil || string(b[:]) != "ack\n" {
		return fmt.Errorf("perf %s: %q %v", cmd, b[:], err)
	}
	return nil
}

// Enable starts counting; Disable stops it.
func (c *sysCounter) Enable() error  { return c.command("enable") }
func (c *sysCounter) Disable() error { return c.command("disable") }

// Stop ends perf and returns what it counted while enabled.
func (c *sysCounter) Stop() (syscalls, switches float64, err error) {
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	_ = c.cmd.Wait()
	_ = c.ctl.Close()
	_ = c.ack.Close()
	b, err := os.ReadFile(c.out)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ",")
		if len(f) < 3 {
			continue
		}
		v, perr := strconv.ParseFloat(f[0], 64)
		if perr != nil {
			continue
		}
		switch f[2] {
		case "raw_syscalls:sys_enter":
			syscalls = v
		case "context-switches":
			switches = v
		}
	}
	return syscalls, switches, nil
}

func (c *sysCounter) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	if c.ctl != nil {
		_ = c.ctl.Close()
	}
}

// sysCounters are the counters of one load run's SyscallPids.
type sysCounters []*sysCounter

// startSysCounters attaches a counter to each pid (disabled); on any
// failure it stops those started and returns the error.
func startSysCounters(pids []int) (sysCounters, string, error) {
	if len(pids) == 0 {
		return nil, "", nil
	}
	dir, err := os.MkdirTemp("", "proxycmp-perf-")
	if err != nil {
		return nil, "", err
	}
	var cs sysCounters
	for i, pid := range pids {
		c, err := startSysCounter(dir, strconv.Itoa(i), pid)
		if err != nil {
			cs.stop()
			_ = os.RemoveAll(dir)
			return nil, "", err
		}
		cs = append(cs, c)
	}
	return cs, dir, nil
}

// enable starts counting on every counter.
func (cs sysCounters) enable() error {
	for _, c := range cs {
		if err := c.Enable(); err != nil {
			return err
		}
	}
	return nil
}

// stop ends every counter and returns the system calls and context
// switches each counted while enabled.
func (cs sysCounters) stop() (syscalls, switches []float64, err error) {
	for _, c := range cs {
		_ = c.Disable()
		sc, sw, e := c.Stop()
		if e != nil && err == nil {
			err = e
		}
		syscalls, switches = append(syscalls, sc), append(switches, sw)
	}
	return syscalls, switches, err
}

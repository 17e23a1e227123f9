package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// procSample is what a run charges to a set of processes: CPU time, user
// and kernel, and context switches (voluntary: the thread slept, waiting
// for I/O or a wake-up; involuntary: it was preempted).
type procSample struct {
	User, System         time.Duration
	Voluntary, Preempted int64
}

func (a procSample) sub(b procSample) procSample {
	return procSample{a.User - b.User, a.System - b.System, a.Voluntary - b.Voluntary, a.Preempted - b.Preempted}
}

func (a procSample) add(b procSample) procSample {
	return procSample{a.User + b.User, a.System + b.System, a.Voluntary + b.Voluntary, a.Preempted + b.Preempted}
}

// sampleProcs sums procSample over pids, every thread of each (the
// process's own /proc/PID/status counts its main thread only). Processes
// or threads that cannot be read are skipped.
func sampleProcs(pids []int) procSample {
	var s procSample
	for _, pid := range pids {
		if st, err := procs.ReadStat(pid); err == nil {
			s.User += st.User
			s.System += st.System
		}
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			st := procs.Status(b)
			s.Voluntary += max(0, st.Field("voluntary_ctxt_switches"))
			s.Preempted += max(0, st.Field("nonvoluntary_ctxt_switches"))
		}
	}
	return s
}

// sampleSelf is procSample of this process (getrusage: CPU to the
// microsecond, context switches of every thread, exited ones included).
func sampleSelf() procSample {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return procSample{}
	}
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return procSample{User: tv(ru.Utime), System: tv(ru.Stime), Voluntary: ru.Nvcsw, Preempted: ru.Nivcsw}
}

// ProcPerRequest is a procSample divided by the requests of a run.
type ProcPerRequest struct {
	UserUS      float64 `json:"user_us"`
	SystemUS    float64 `json:"system_us"`
	Voluntary   float64 `json:"voluntary_switches"`
	Involuntary float64 `json:"involuntary_switches"`
}

func (s procSample) per(n int64) ProcPerRequest {
	if n <= 0 {
		return ProcPerRequest{}
	}
	f := float64(n)
	return ProcPerRequest{
		UserUS: float64(s.User.Microseconds()) / f, SystemUS: float64(s.System.Microseconds()) / f,
		Voluntary: float64(s.Voluntary) / f, Involuntary: float64(s.Preempted) / f,
	}
}

// CPUUS is user+system µs per request.
func (p ProcPerRequest) CPUUS() float64 { return p.UserUS + p.SystemUS }

package proxy

// The differential transcript test: every transcript in
// testdata/transcripts is sent over TCP to a fresh real memcached and to the
// in-process memory backend, and the replies must be equal byte for byte
// (testdata/transcripts/README.md describes the format).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/proxy/embedded"
	"github.com/poplimit/poplimit/shard"
	"go.uber.org/goleak"
)

const transcriptDir = "../testdata/transcripts"

// transcriptStep is one step of a transcript: bytes sent in one write, and
// whether the server is expected to close the connection after them.
type transcriptStep struct {
	line  int // first line of the step in its file, for messages
	send  []byte
	close bool
}

// transcript is a parsed transcript file.
type transcript struct {
	steps []transcriptStep
	// noPipeline (directive "!no-pipeline") keeps the transcript out of
	// the pipelined run.
	noPipeline bool
}

// parseTranscript parses a transcript file (see the README next to them).
// Within a line, $cas stands for the CAS unique of the last VALUE line with
// one that the same connection received; it is kept as is in send and
// substituted when the step is sent.
func parseTranscript(src []byte) (transcript, error) {
	var tr transcript
	var cur *transcriptStep
	total := 0
	sawGets := false
	for i, raw := range strings.Split(string(src), "\n") {
		lineNo := i + 1
		raw = strings.TrimSuffix(raw, "\r")
		switch {
		case strings.TrimSpace(raw) == "":
			cur = nil
			continue
		case strings.HasPrefix(raw, "#"):
			continue
		case raw == "!no-pipeline":
			if cur != nil {
				return transcript{}, fmt.Errorf("line %d: !no-pipeline inside a step", lineNo)
			}
			tr.noPipeline = true
			continue
		case raw == "!close":
			if cur == nil {
				return transcript{}, fmt.Errorf("line %d: !close outside a step", lineNo)
			}
			cur.close = true
			cur = nil
			continue
		case strings.HasPrefix(raw, "!"):
			return transcript{}, fmt.Errorf("line %d: unknown directive %q", lineNo, raw)
		}
		if cur == nil {
			tr.steps = append(tr.steps, transcriptStep{line: lineNo})
			cur = &tr.steps[len(tr.steps)-1]
			sawGets = false
		}
		if strings.Contains(raw, "$cas") && sawGets {
			return transcript{}, fmt.Errorf("line %d: $cas after a gets/gats of the same step: the unique would be an older one; start a new step", lineNo)
		}
		if strings.HasPrefix(raw, "gets ") || strings.HasPrefix(raw, "gats ") {
			sawGets = true
		}
		b, crlf, err := decodeTranscriptLine(raw)
		if err != nil {
			return transcript{}, fmt.Errorf("line %d: %w", lineNo, err)
		}
		total += len(b) + 2
		if total > maxTranscriptBytes {
			return transcript{}, fmt.Errorf("line %d: transcript over %d bytes", lineNo, maxTranscriptBytes)
		}
		cur.send = append(cur.send, b...)
		if crlf {
			cur.send = append(cur.send, "\r\n"...)
		}
	}
	return tr, nil
}

// pipelined merges consecutive steps into one write, as a client pipelining
// the whole transcript would send them. A step using $cas, and a step after
// one that closes the connection, starts a new write ($cas needs the reply
// before it).
func pipelined(steps []transcriptStep) []transcriptStep {
	var out []transcriptStep
	for _, st := range steps {
		n := len(out)
		if n == 0 || out[n-1].close || bytes.Contains(st.send, []byte("$cas")) {
			out = append(out, transcriptStep{line: st.line, send: append([]byte(nil), st.send...), close: st.close})
			continue
		}
		out[n-1].send = append(out[n-1].send, st.send...)
		out[n-1].close = st.close
	}
	return out
}

// maxTranscriptRepeat bounds \[N]c and maxTranscriptBytes a whole
// transcript, so that a transcript cannot ask for unbounded memory.
const (
	maxTranscriptRepeat = 2 << 20
	maxTranscriptBytes  = 16 << 20
)

// decodeTranscriptLine decodes the escapes of one transcript line and
// reports whether CRLF is to be appended (not when the line ends in \c).
func decodeTranscriptLine(s string) (out []byte, crlf bool, err error) {
	return decodeEscapes(s, 0)
}

// decodeEscapes is decodeTranscriptLine with every \[N]c repeat cut to
// clampRepeat bytes when clampRepeat > 0 (fuzz seeds stay small).
func decodeEscapes(s string, clampRepeat int) (out []byte, crlf bool, err error) {
	crlf = true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(s) {
			return nil, false, errors.New("lone backslash at end of line")
		}
		switch s[i] {
		case '\\':
			out = append(out, '\\')
		case 'r':
			out = append(out, '\r')
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case '0':
			out = append(out, 0)
		case 's':
			out = append(out, ' ')
		case 'x':
			if i+2 >= len(s) {
				return nil, false, errors.New(`short \x escape`)
			}
			v, perr := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if perr != nil {
				return nil, false, fmt.Errorf(`bad \x escape: %w`, perr)
			}
			out = append(out, byte(v))
			i += 2
		case 'c':
			if i != len(s)-1 {
				return nil, false, errors.New(`\c not at end of line`)
			}
			crlf = false
		case '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 || i+end+1 >= len(s) {
				return nil, false, errors.New(`bad \[N]c repeat`)
			}
			n, perr := strconv.Atoi(s[i+1 : i+end])
			if perr != nil || n < 0 || n > maxTranscriptRepeat {
				return nil, false, fmt.Errorf(`bad \[N]c count %q`, s[i+1:i+end])
			}
			if clampRepeat > 0 {
				n = min(n, clampRepeat)
			}
			out = append(out, bytes.Repeat([]byte{s[i+end+1]}, n)...)
			i += end + 1
		default:
			return nil, false, fmt.Errorf(`unknown escape \%c`, s[i])
		}
	}
	return out, crlf, nil
}

// transcriptConn runs steps on one target, reconnecting after a close.
type transcriptConn struct {
	addr    string
	conn    net.Conn
	r       *bufio.Reader
	lastCAS string
}

const transcriptTimeout = 5 * time.Second

// sentinel follows every step that does not close the connection; its
// "VERSION ..." reply marks the end of the step's replies and is dropped
// (versions differ by nature).
const sentinel = "version\r\n"

func (tc *transcriptConn) close() {
	if tc.conn != nil {
		tc.conn.Close()
		tc.conn = nil
	}
}

// run sends one step and returns the replies it got.
func (tc *transcriptConn) run(st transcriptStep) ([]byte, error) {
	if tc.conn == nil {
		c, err := net.DialTimeout("tcp", tc.addr, transcriptTimeout)
		if err != nil {
			return nil, err
		}
		tc.conn, tc.r = c, bufio.NewReaderSize(c, 64<<10)
	}
	_ = tc.conn.SetDeadline(time.Now().Add(transcriptTimeout))
	send := bytes.ReplaceAll(st.send, []byte("$cas"), []byte(tc.lastCAS))
	if !st.close {
		send = append(send, sentinel...)
	}
	if _, err := tc.conn.Write(send); err != nil {
		return nil, err
	}
	var out []byte
	if st.close {
		out, err := io.ReadAll(tc.r)
		tc.close()
		return out, err
	}
	for {
		line, err := tc.r.ReadBytes('\n')
		if err != nil {
			return out, fmt.Errorf("after %q: %w", out, err)
		}
		if bytes.HasPrefix(line, []byte("VERSION ")) {
			return out, nil
		}
		out = append(out, line...)
		if f := strings.Fields(string(line)); len(f) > 0 && metaStatus[f[0]] {
			for _, t := range f[1:] {
				if len(t) > 1 && t[0] == 'c' && t != "c0" {
					tc.lastCAS = t[1:]
				}
			}
		}
		if f := strings.Fields(string(line)); len(f) >= 2 && f[0] == "VA" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return out, fmt.Errorf("bad VA line %q", line)
			}
			data := make([]byte, n+2)
			if _, err := io.ReadFull(tc.r, data); err != nil {
				return out, err
			}
			out = append(out, data...)
		}
		if f := strings.Fields(string(line)); len(f) >= 4 && f[0] == "VALUE" {
			n, err := strconv.Atoi(f[3])
			if err != nil {
				return out, fmt.Errorf("bad VALUE line %q", line)
			}
			if len(f) == 5 {
				tc.lastCAS = f[4]
			}
			data := make([]byte, n+2)
			if _, err := io.ReadFull(tc.r, data); err != nil {
				return out, err
			}
			out = append(out, data...)
		}
	}
}

// runTranscript runs all steps on addr and returns one reply per step. A
// step that fails (an unexpected close, a timeout) gets its partial reply
// followed by "<error: ...>", and the next step runs on a new connection,
// so that one difference does not hide the others. err is the first such
// failure.
func runTranscript(addr string, steps []transcriptStep) (replies [][]byte, err error) {
	tc := &transcriptConn{addr: addr}
	defer tc.close()
	replies = make([][]byte, len(steps))
	for i, st := range steps {
		r, serr := tc.run(st)
		if serr != nil {
			r = append(r, "<error: "+serr.Error()+">"...)
			tc.close()
			if err == nil {
				err = fmt.Errorf("step at line %d: %w", st.line, serr)
			}
		}
		replies[i] = r
	}
	return replies, err
}

func loadTranscripts(t *testing.T) map[string]transcript {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(transcriptDir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s: %v", transcriptDir, err)
	}
	out := make(map[string]transcript)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := parseTranscript(src)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = tr
	}
	return out
}

// TestDifferentialTranscripts runs every transcript on a fresh memcached
// and on fresh mcproxy servers with embedded memory shards, and compares the
// replies byte for byte:
//   - with one shard, exactly: both sides count CAS uniques from zero and
//     see the same commands, so even the uniques must be equal;
//   - with three shards, with CAS uniques normalised: each shard has its own
//     counter (and flush_all, sent to every shard, takes a unique on each),
//     so a unique is replaced by its rank among the uniques seen for the
//     same key ("<cas a#2>"): whether an operation changed a key's unique
//     is still compared, its number is not.
//
// Each transcript runs twice: step by step (a "version" round trip after
// each step), and pipelined (consecutive steps in one write, see
// pipelined), each time on its own fresh memcached and fresh servers.
func TestDifferentialTranscripts(t *testing.T) {
	// Every server and connection the subtests start must be gone at the
	// end (cleanups run last-registered first: processes, then this).
	leakOpt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leakOpt) })
	transcripts := loadTranscripts(t)
	// Per transcript: a reference memcached per mode, and three shards
	// behind mcproxy for the stepwise run.
	mcs := fixture.Memcached(t, 5*len(transcripts))
	for name, tr := range transcripts {
		runs := []struct {
			mode   string
			steps  []transcriptStep
			mc     *procs.Memcached
			shards []*procs.Memcached
		}{
			{"stepwise", tr.steps, mcs[0], mcs[1:4]},
			{"pipelined", pipelined(tr.steps), mcs[4], nil},
		}
		mcs = mcs[5:]
		if tr.noPipeline {
			runs = runs[:1]
		}
		for _, run := range runs {
			t.Run(name+"/"+run.mode, func(t *testing.T) {
				t.Parallel()
				diffTranscript(t, name, run.mc.Addr, run.steps, run.shards)
			})
		}
	}
}

// diffTranscript runs steps on memcached at mcAddr, then on mcproxy with
// one and with three embedded shards, and with the real memcached shards
// given if any, and reports every step whose replies differ.
func diffTranscript(t *testing.T, name, mcAddr string, steps []transcriptStep, shards []*procs.Memcached) {
	want, err := runTranscript(mcAddr, steps)
	if err != nil {
		t.Fatalf("memcached: %v", err)
	}
	type target struct {
		name  string
		addr  string
		exact bool // CAS uniques compared as they are
	}
	var targets []target
	for _, n := range []int{1, 3} {
		addr, _ := serveEmbeddedForTest(t, n)
		targets = append(targets, target{fmt.Sprintf("mcproxy --embedded %d", n), addr, n == 1})
	}
	if len(shards) > 0 {
		servers := make([]shard.Server, len(shards))
		for i, m := range shards {
			servers[i] = shard.Server{Addr: m.Addr}
		}
		addr := serveProxyForTest(t, RouterConfig{Servers: servers})
		targets = append(targets, target{fmt.Sprintf("mcproxy with %d memcached shards", len(shards)), addr, false})
	}
	for _, tg := range targets {
		got, err := runTranscript(tg.addr, steps)
		if err != nil {
			t.Errorf("%s: %v", tg.name, err)
		}
		w := want
		if !tg.exact {
			w, got = normaliseCAS(want), normaliseCAS(got)
		}
		for j := range steps {
			if !bytes.Equal(got[j], w[j]) {
				at := firstDiff(got[j], w[j])
				t.Errorf("%s:%d (%s): sent %s\nreplies differ at byte %d:\nmemcached: %s\nmcproxy:   %s",
					name, steps[j].line, tg.name, clip(steps[j].send), at, around(w[j], at), around(got[j], at))
			}
		}
	}
}

// firstDiff returns the index of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// around quotes b from a little before at, shortened when long.
func around(b []byte, at int) string {
	from := max(0, at-60)
	prefix := ""
	if from > 0 {
		prefix = fmt.Sprintf("(%d bytes)...", from)
	}
	return prefix + clip(b[from:])
}

// clip quotes b, shortened when long (1 MB values).
func clip(b []byte) string {
	if len(b) > 300 {
		return strconv.Quote(string(b[:150])) + fmt.Sprintf("...(%d bytes)...", len(b)-300) +
			strconv.Quote(string(b[len(b)-150:]))
	}
	return strconv.Quote(string(b))
}

// serveEmbeddedForTest starts an mcproxy Server on a loopback port with n
// in-process memory shards (what mcproxy --embedded n runs) and stops it
// when the test ends; it returns the address and the backends.
func serveEmbeddedForTest(t testing.TB, n int) (string, []*EmbeddedForTest) {
	t.Helper()
	backends := make([]*EmbeddedForTest, n)
	servers := make([]shard.Server, n)
	for i := range servers {
		servers[i] = shard.Server{Addr: fmt.Sprintf("embedded-%d:0", i), Name: fmt.Sprintf("embedded-%d", i)}
	}
	addr := serveProxyForTest(t, RouterConfig{
		Servers: servers,
		NewBackend: func(i int, _ shard.Server, _ BackendHooks) (Backend, error) {
			b, err := NewEmbeddedForTest(embedded.Config{})
			backends[i] = b
			return b, err
		},
	})
	return addr, backends
}

// serveProxyForTest starts an mcproxy Server with rc (hash tag "{}") on a
// loopback port and stops it when the test ends; it returns the address.
func serveProxyForTest(t testing.TB, rc RouterConfig) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc.HashTag, rc.Logger = shard.DefaultHashTag(), quiet
	r, err := NewRouter(rc)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := ServeForTest(t, r, quiet)
	return addr
}

func TestParseTranscript(t *testing.T) {
	src := "# comment\nset a 0 0 1\n1\n\n\nget a\\c\n\\r\\n\n!close\nx \\[3]y\\x41\\s\\\\\n"
	tr, err := parseTranscript([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	steps := tr.steps
	want := []transcriptStep{
		{line: 2, send: []byte("set a 0 0 1\r\n1\r\n")},
		{line: 6, send: []byte("get a\r\n\r\n"), close: true},
		{line: 9, send: []byte("x yyyA \\\r\n")},
	}
	if len(steps) != len(want) {
		t.Fatalf("got %d steps: %+v", len(steps), steps)
	}
	for i := range want {
		if steps[i].line != want[i].line || !bytes.Equal(steps[i].send, want[i].send) || steps[i].close != want[i].close {
			t.Errorf("step %d: got %+v %q, want %+v %q", i, steps[i], steps[i].send, want[i], want[i].send)
		}
	}
	pipe := pipelined(append(steps, transcriptStep{line: 12, send: []byte("cas $cas\r\n")}, transcriptStep{line: 13, send: []byte("z\r\n")}))
	wantPipe := []string{"set a 0 0 1\r\n1\r\nget a\r\n\r\n", "x yyyA \\\r\n", "cas $cas\r\nz\r\n"}
	if len(pipe) != len(wantPipe) || !pipe[0].close || pipe[1].line != 9 || pipe[2].line != 12 {
		t.Fatalf("pipelined: %+v", pipe)
	}
	for i, w := range wantPipe {
		if string(pipe[i].send) != w {
			t.Errorf("pipelined step %d: %q, want %q", i, pipe[i].send, w)
		}
	}
	if tr, err := parseTranscript([]byte("!no-pipeline\nget a\n")); err != nil || !tr.noPipeline {
		t.Errorf("!no-pipeline: %+v %v", tr, err)
	}
	for _, bad := range []string{"gets a\ncas a 0 0 1 $cas", "a\n!no-pipeline", "a\\", "a\\q", "\\xZZ", "\\x4", "a\\cb", "\\[x]y", "\\[5]", "!close", "a\n!nope", "\\[99999999]x"} {
		if _, err := parseTranscript([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// encodeTranscriptLine is the inverse of decodeTranscriptLine for one line
// of arbitrary bytes: it escapes everything but printable ASCII, and a
// leading '#' or '!'. The fuzz target checks the round trip.
func encodeTranscriptLine(b []byte, crlf bool) string {
	var sb strings.Builder
	for i, c := range b {
		switch {
		case c == '\\':
			sb.WriteString(`\\`)
		case i == 0 && (c == '#' || c == '!'), c < 0x21 || c > 0x7e:
			fmt.Fprintf(&sb, `\x%02x`, c)
		default:
			sb.WriteByte(c)
		}
	}
	if !crlf {
		sb.WriteString(`\c`)
	}
	return sb.String()
}

// FuzzParseTranscript: the transcript parser never panics, never produces
// more than its repeat bound allows, and decodes what encodeTranscriptLine
// encodes back to the same bytes.
func FuzzParseTranscript(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(transcriptDir, "*.txt"))
	for _, name := range files {
		if src, err := os.ReadFile(name); err == nil && len(src) < 1<<16 {
			f.Add(src, []byte("set a 0 0 1"))
		}
	}
	f.Add([]byte("set a 0 0 1\n1\n\nget a\\c\n!close\n\\[3]x\\x00\\s"), []byte("#\x00\\ \r\n!"))
	f.Fuzz(func(t *testing.T, src, payload []byte) {
		if tr, err := parseTranscript(src); err == nil {
			total := 0
			for _, st := range tr.steps {
				total += len(st.send)
				if st.line < 1 || st.line > bytes.Count(src, []byte("\n"))+1 {
					t.Fatalf("step line %d out of range", st.line)
				}
			}
			if total > maxTranscriptBytes {
				t.Fatalf("%d bytes from a %d-byte transcript", total, len(src))
			}
		}
		for _, crlf := range []bool{true, false} {
			enc := encodeTranscriptLine(payload, crlf)
			if strings.ContainsAny(enc, "\r\n") {
				t.Fatalf("encoded line %q spans lines", enc)
			}
			dec, gotCRLF, err := decodeTranscriptLine(enc)
			if err != nil || !bytes.Equal(dec, payload) || gotCRLF != crlf {
				t.Fatalf("%q -> %q -> %q %v %v", payload, enc, dec, gotCRLF, err)
			}
		}
	})
}

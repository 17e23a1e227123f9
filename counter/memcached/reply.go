package memcached

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/poplimit/poplimit/counter"
)

// ErrProtocol is a reply the memcached text protocol does not allow there:
// the stream is out of sync, and the connection that gave it is dropped.
var ErrProtocol = errors.New("memcached: protocol error")

// maxValue is the longest value a VALUE block may declare: memcached's
// default item size limit.
const maxValue = 1 << 20

// readLine reads one reply line, without its CRLF; the slice is valid
// until r's next read.
func readLine(r *bufio.Reader) ([]byte, error) {
	l, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, r.Size())
	}
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(l, []byte("\r\n")) {
		return nil, ErrProtocol
	}
	return l[:len(l)-2], nil
}

// readStoreReply reads the reply of add/cas: nil for STORED, else the
// counter sentinel of memcached's answer.
func readStoreReply(r *bufio.Reader) error {
	l, err := readLine(r)
	if err != nil {
		return err
	}
	switch string(l) {
	case "STORED":
		return nil
	case "NOT_STORED":
		return counter.ErrNotStored
	case "EXISTS":
		return counter.ErrCASConflict
	case "NOT_FOUND":
		return counter.ErrNotFound
	}
	return fmt.Errorf("%w: %q", ErrProtocol, l)
}

// readNumReply reads the reply of incr/decr.
func readNumReply(r *bufio.Reader) (uint64, error) {
	l, err := readLine(r)
	if err != nil {
		return 0, err
	}
	if string(l) == "NOT_FOUND" {
		return 0, counter.ErrNotFound
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(l)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrProtocol, l)
	}
	return v, nil
}

// ReadValues reads the reply to one get (gets false) or gets command from
// r: VALUE blocks up to END, calling found for each block with its key,
// its data (without the trailing CRLF; the caller's to keep) and, for
// gets, its cas id (0 for get). It is PipeStore's reader, exported for
// tools that speak to a memcached-protocol server on a connection of
// their own. A line that is neither a VALUE header (with a cas id for
// gets) nor END, a value longer than 1 MiB, or one not followed by CRLF
// is an error wrapping ErrProtocol; an I/O failure is r's error.
func ReadValues(r *bufio.Reader, gets bool, found func(key string, data []byte, cas uint64)) error {
	for {
		l, err := readLine(r)
		if err != nil {
			return err
		}
		if string(l) == "END" {
			return nil
		}
		// memcached separates fields with ASCII spaces only: a legal key
		// may hold bytes bytes.Fields would take for Unicode spaces.
		f := bytes.FieldsFunc(l, func(r rune) bool { return r == ' ' })
		if len(f) < 4 || string(f[0]) != "VALUE" {
			return fmt.Errorf("%w: %q", ErrProtocol, l)
		}
		n, err := strconv.Atoi(string(f[3]))
		if err != nil || n < 0 || n > maxValue {
			return fmt.Errorf("%w: %q", ErrProtocol, l)
		}
		var cas uint64
		if gets {
			if len(f) < 5 {
				return fmt.Errorf("%w: %q", ErrProtocol, l)
			}
			if cas, err = strconv.ParseUint(string(f[4]), 10, 64); err != nil {
				return fmt.Errorf("%w: %q", ErrProtocol, l)
			}
		}
		key := string(f[1])
		buf := make([]byte, n+2)
		if _, err := readFull(r, buf); err != nil {
			return err
		}
		if !bytes.HasSuffix(buf, []byte("\r\n")) {
			return ErrProtocol
		}
		found(key, buf[:n], cas)
	}
}

// readFull reads len(b) bytes from r, or returns r's error.
func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

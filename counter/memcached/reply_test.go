package memcached_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/counter/memcached"
)

// Reading the reply to a get on a connection of one's own.
func ExampleReadValues() {
	reply := "VALUE a 0 2\r\n17\r\nVALUE b 0 0\r\n\r\nEND\r\n"
	err := memcached.ReadValues(bufio.NewReader(strings.NewReader(reply)), false, func(key string, data []byte, _ uint64) {
		fmt.Printf("%s=%q\n", key, data)
	})
	fmt.Println(err)
	// Output:
	// a="17"
	// b=""
	// <nil>
}

func TestReadValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   string
		gets    bool
		want    string // key=data/cas, in order
		wantErr error
	}{
		{"get", "VALUE k 0 2\r\n12\r\nVALUE j 5 1\r\n7\r\nEND\r\n", false, "k=12/0 j=7/0 ", nil},
		{"gets", "VALUE k 0 2 77\r\n12\r\nEND\r\n", true, "k=12/77 ", nil},
		{"get ignores a cas id", "VALUE k 0 2 77\r\n12\r\nEND\r\n", false, "k=12/0 ", nil},
		{"nothing held", "END\r\n", false, "", nil},
		{"gets without a cas id", "VALUE k 0 2\r\n12\r\nEND\r\n", true, "", memcached.ErrProtocol},
		{"server error", "SERVER_ERROR out of memory\r\n", false, "", memcached.ErrProtocol},
		{"short header", "VALUE k 0\r\n", false, "", memcached.ErrProtocol},
		{"negative length", "VALUE k 0 -1\r\n", false, "", memcached.ErrProtocol},
		{"over 1 MiB", "VALUE k 0 1048577\r\n", false, "", memcached.ErrProtocol},
		{"data not followed by CRLF", "VALUE k 0 1\r\n123\r\nEND\r\n", false, "", memcached.ErrProtocol},
		{"line without CR", "END\n", false, "", memcached.ErrProtocol},
		{"cut short", "VALUE k 0 5\r\n12", false, "", io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got strings.Builder
			err := memcached.ReadValues(bufio.NewReader(strings.NewReader(tc.reply)), tc.gets, func(key string, data []byte, cas uint64) {
				fmt.Fprintf(&got, "%s=%s/%d ", key, data, cas)
			})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %q, %v; want %q", got.String(), err, tc.want)
			}
		})
	}
}

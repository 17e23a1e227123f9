package kafkasink

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	long := strings.Repeat("t", maxTopicLen+1)
	tests := []struct {
		name        string
		in          string
		wantBrokers []string
		wantTopic   string
		wantErr     error // nil: success; errAny: any error
	}{
		{name: "one broker", in: "kafka://k1:9092/rejections", wantBrokers: []string{"k1:9092"}, wantTopic: "rejections"},
		{name: "several brokers", in: "kafka://k1:9092,k2:9093,10.0.0.3:9094/sec.events_v1-x", wantBrokers: []string{"k1:9092", "k2:9093", "10.0.0.3:9094"}, wantTopic: "sec.events_v1-x"},
		{name: "broker without port", in: "kafka://k1/t", wantBrokers: []string{"k1"}, wantTopic: "t"},
		{name: "scheme in upper case", in: "KAFKA://k1:9092/t", wantBrokers: []string{"k1:9092"}, wantTopic: "t"},
		{name: "ipv6 broker", in: "kafka://[::1]:9092/t", wantBrokers: []string{"[::1]:9092"}, wantTopic: "t"},
		{name: "other scheme", in: "file:///var/log/events", wantErr: ErrScheme},
		{name: "no scheme", in: "k1:9092/t", wantErr: ErrScheme},
		{name: "empty", in: "", wantErr: ErrScheme},
		{name: "single slash", in: "kafka:/k1/t", wantErr: ErrScheme},
		{name: "no brokers", in: "kafka:///t", wantErr: ErrNoBrokers},
		{name: "nothing after scheme", in: "kafka://", wantErr: ErrNoBrokers},
		{name: "empty broker in the middle", in: "kafka://k1,,k2/t", wantErr: ErrEmptyBroker},
		{name: "trailing comma", in: "kafka://k1,/t", wantErr: ErrEmptyBroker},
		{name: "leading comma", in: "kafka://,k1/t", wantErr: ErrEmptyBroker},
		{name: "no topic", in: "kafka://k1:9092", wantErr: ErrNoTopic},
		{name: "empty topic", in: "kafka://k1:9092/", wantErr: ErrNoTopic},
		{name: "topic with a slash", in: "kafka://k1/a/b", wantErr: ErrBadTopic},
		{name: "topic with a space", in: "kafka://k1/a b", wantErr: ErrBadTopic},
		{name: "topic dot", in: "kafka://k1/.", wantErr: ErrBadTopic},
		{name: "topic dot dot", in: "kafka://k1/..", wantErr: ErrBadTopic},
		{name: "topic too long", in: "kafka://k1/" + long, wantErr: ErrBadTopic},
		{name: "query refused", in: "kafka://k1/t?acks=1", wantErr: errAny},
		{name: "fragment refused", in: "kafka://k1/t#x", wantErr: errAny},
		{name: "user info refused", in: "kafka://u:p@k1/t", wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			brokers, topic, err := ParseURL(tt.in)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("ParseURL(%q): %v", tt.in, err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("ParseURL(%q) error = %v, want %v", tt.in, err, tt.wantErr)
			case tt.wantErr != nil:
				if !strings.HasPrefix(err.Error(), "kafkasink: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
				return
			}
			if !slices.Equal(brokers, tt.wantBrokers) || topic != tt.wantTopic {
				t.Errorf("ParseURL(%q) = %q, %q; want %q, %q", tt.in, brokers, topic, tt.wantBrokers, tt.wantTopic)
			}
		})
	}
}

var errAny = errors.New("any error")

// FuzzParseURL: never panics; what it accepts rebuilds to the same URL
// (scheme aside) and names at least one non-empty broker and a valid topic.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"kafka://k1:9092/t", "kafka://a,b,c/x.y", "kafka://,/", "kafka:///", "kafka://k/a/b", "KAFKA://[::1]:1/t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		brokers, topic, err := ParseURL(in)
		if err != nil {
			return
		}
		if len(brokers) == 0 || slices.Contains(brokers, "") || checkTopic(topic) != nil {
			t.Fatalf("ParseURL(%q) accepted %q, %q", in, brokers, topic)
		}
		if got := strings.Join(brokers, ",") + "/" + topic; got != in[len("kafka://"):] {
			t.Fatalf("ParseURL(%q) rebuilds to %q", in, got)
		}
	})
}

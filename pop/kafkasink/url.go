package kafkasink

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of ParseURL, tested with errors.Is; the returned error wraps one
// of them and names the offending part.
var (
	ErrScheme      = errors.New("kafkasink: URL must start with kafka://")
	ErrNoBrokers   = errors.New("kafkasink: URL names no broker")
	ErrEmptyBroker = errors.New("kafkasink: URL has an empty broker in its list")
	ErrNoTopic     = errors.New("kafkasink: URL names no topic")
	ErrBadTopic    = errors.New("kafkasink: invalid topic name")
)

// maxTopicLen is Kafka's limit on a topic name's length.
const maxTopicLen = 249

// ParseURL splits "kafka://BROKER[,BROKER...]/TOPIC" into its brokers
// (host:port, as written; a broker without a port means Kafka's 9092) and
// its topic. The topic follows Kafka's rules: 1 to 249 characters of
// [a-zA-Z0-9._-], neither "." nor "..". Query strings, fragments and user
// information are refused rather than ignored.
func ParseURL(raw string) (brokers []string, topic string, err error) {
	const scheme = "kafka://"
	if len(raw) < len(scheme) || !strings.EqualFold(raw[:len(scheme)], scheme) {
		return nil, "", fmt.Errorf("%w: %q", ErrScheme, raw)
	}
	rest := raw[len(scheme):]
	if i := strings.IndexAny(rest, "?#@"); i >= 0 {
		return nil, "", fmt.Errorf("kafkasink: unexpected %q in URL %q (want kafka://BROKER[,BROKER...]/TOPIC)", rest[i], raw)
	}
	hosts, topic, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return nil, "", fmt.Errorf("%w: %q", ErrNoBrokers, raw)
	}
	for i, b := range strings.Split(hosts, ",") {
		if b == "" {
			return nil, "", fmt.Errorf("%w: broker %d of %q", ErrEmptyBroker, i+1, raw)
		}
		brokers = append(brokers, b)
	}
	if topic == "" {
		return nil, "", fmt.Errorf("%w: %q (want kafka://BROKER[,BROKER...]/TOPIC)", ErrNoTopic, raw)
	}
	if err := checkTopic(topic); err != nil {
		return nil, "", err
	}
	return brokers, topic, nil
}

// checkTopic applies Kafka's topic naming rules.
func checkTopic(t string) error {
	if t == "." || t == ".." {
		return fmt.Errorf("%w: %q is reserved", ErrBadTopic, t)
	}
	if len(t) > maxTopicLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrBadTopic, len(t), maxTopicLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q has %q at byte %d (allowed: letters, digits, '.', '_', '-')", ErrBadTopic, t, c, i)
		}
	}
	return nil
}

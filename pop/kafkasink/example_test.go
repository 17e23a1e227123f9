package kafkasink_test

import (
	"context"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poplimit/poplimit/pop/kafkasink"
)

// A sink is built from an events URL, fed one encoded event per rejection,
// and closed at shutdown with a bound on how long the flush may take.
func Example() {
	brokers, topic, err := kafkasink.ParseURL("kafka://kafka-1:9092,kafka-2:9092/poplimit.rejections")
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	sink, err := kafkasink.New(kafkasink.Config{Brokers: brokers, Topic: topic, Registerer: reg})
	if err != nil {
		log.Fatal(err)
	}

	// On the request path: never blocks; drops are counted.
	sink.Produce([]byte("3f9a0c1d2e4b5a69"), []byte(`{"policy":"api-default","reason":"over_limit","status":429}`))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sink.Close(ctx); err != nil {
		log.Printf("rejection events: %v (%d dropped)", err, sink.Dropped())
	}
}

package proxy

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"strconv"
	"time"
)

// StatsJSON returns the Twemproxy stats port's JSON document (nutcracker
// 0.5's shape and key order): service, source (host name), version,
// uptime, timestamp, total_connections, curr_connections, then per pool
// client_eof, client_err, client_connections, server_ejects,
// forward_error, fragments and per server (named like nutcracker: the
// server's name, else host:port) server_eof, server_err, server_timedout,
// server_connections, server_ejected_at, requests, request_bytes,
// responses, response_bytes, in_queue, in_queue_bytes, out_queue,
// out_queue_bytes.
//
// Meanings in mcproxy: client_eof counts closed client connections (EOF or
// not), client_err protocol errors, forward_error calls failed at a shard
// (SERVER_ERROR), server_err failures other than timeouts, server_timedout
// timeouts, server_connections the open connections when the backend
// reports them (a Pool does; else the configured server_connections),
// requests calls sent, responses calls answered. fragments counts the
// sub-requests of multi-key gets split over shards: a get whose keys span
// k shards makes k fragments, one whose keys all live on one shard is
// passed through whole and makes none (nutcracker 0.5.0 declares this
// stat but never increments it; 0.3 counted one per key split off).
//
// The server byte and queue fields come from the backend's BackendStats
// (see Pool.Stats): server_eof the connections the shard closed (EOF on
// read), request_bytes the wire bytes of the requests sent to the shard,
// response_bytes the bytes of the replies read from it, in_queue and
// in_queue_bytes the requests queued for a connection to the shard and
// not handed to it yet and their wire bytes, out_queue and
// out_queue_bytes the requests sent and awaiting their reply and their
// bytes. The in-process LocalBackend has no wire and no queue (it
// answers inside Do): these fields are 0 for its shards. Counters
// include the shard sets replaced by reloads, draining or closed (see the
// shardTotals of reload.go), so they never go back; queue gauges count
// the live and draining sets only.
func (p *Proxy) StatsJSON(version string) []byte {
	now := p.now()
	host, _ := os.Hostname()
	snaps := p.snapshot()
	var total uint64
	var curr int64
	for _, ps := range snaps {
		total += ps.totalConns
		curr += ps.clientConns
	}
	b := make([]byte, 0, 1024)
	str := func(s string) {
		q, _ := json.Marshal(s)
		b = append(b, q...)
	}
	num := func(key string, v uint64, last bool) {
		str(key)
		b = append(b, ':')
		b = strconv.AppendUint(b, v, 10)
		if !last {
			b = append(b, ", "...)
		}
	}
	b = append(b, `{"service":"nutcracker", "source":`...)
	str(host)
	b = append(b, `, "version":`...)
	str(version)
	b = append(b, ", "...)
	num("uptime", uint64(now.Sub(p.started)/time.Second), false)
	num("timestamp", uint64(now.Unix()), false)
	num("total_connections", total, false)
	num("curr_connections", uint64(max(curr, 0)), len(snaps) == 0)
	for pi, ps := range snaps {
		str(ps.name)
		b = append(b, ": {"...)
		var ejects, fwdErr uint64
		for _, ss := range ps.shards {
			ejects += ss.t.ejections
			fwdErr += ss.t.errors
		}
		num("client_eof", ps.totalConns-uint64(max(ps.clientConns, 0)), false)
		num("client_err", ps.protocolErrs, false)
		num("client_connections", uint64(max(ps.clientConns, 0)), false)
		num("server_ejects", ejects, false)
		num("forward_error", fwdErr, false)
		num("fragments", ps.fragments, len(ps.shards) == 0)
		for si, ss := range ps.shards {
			str(ss.label)
			b = append(b, ": {"...)
			var ejectedAt uint64
			if !ss.ejectedAt.IsZero() {
				ejectedAt = uint64(ss.ejectedAt.UnixMicro())
			}
			num("server_eof", ss.w.ServerEOF, false)
			num("server_err", ss.t.errors-ss.t.timeouts, false)
			num("server_timedout", ss.t.timeouts, false)
			num("server_connections", uint64(max(ss.conns, 0)), false)
			num("server_ejected_at", ejectedAt, false)
			num("requests", ss.t.requests, false)
			num("request_bytes", ss.w.RequestBytes, false)
			num("responses", ss.t.lat.count(), false)
			num("response_bytes", ss.w.ResponseBytes, false)
			num("in_queue", ss.w.InQueue, false)
			num("in_queue_bytes", ss.w.InQueueBytes, false)
			num("out_queue", ss.w.OutQueue, false)
			num("out_queue_bytes", ss.w.OutQueueBytes, true)
			b = append(b, '}')
			if si < len(ps.shards)-1 {
				b = append(b, ", "...)
			}
		}
		b = append(b, '}')
		if pi < len(snaps)-1 {
			b = append(b, ',')
		}
	}
	return append(b, '}')
}

// ServeStats serves StatsJSON on ln like nutcracker's stats port: each
// connection gets the document and is closed. It returns when ln is
// closed (nil) or fails.
func (p *Proxy) ServeStats(ln net.Listener, version string) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(p.StatsJSON(version))
		_ = c.Close()
	}
}

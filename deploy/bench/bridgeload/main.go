// Command bridgeload drives an HTTP produce proxy in the Strimzi Kafka
// Bridge's format (deploy/bench/bridge) as the harness's workers drive
// the gateway: clients posting batches of records open loop, one
// partition each, for a while. It prints the records acknowledged, their
// rate, the batch latency and the proxy process's CPU (from /proc) per
// record and records per CPU-second, as JSON. A benchmark's load driver:
// it must never be pointed at anything but a proxy on this machine.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "the proxy's base URL")
	topic := flag.String("topic", "bridge-output", "topic")
	clients := flag.Int("clients", 64, "clients posting at once, one partition each (client mod partitions)")
	partitions := flag.Int("partitions", 16, "the topic's partitions")
	batch := flag.Int("batch-size", 100, "records per request")
	size := flag.Int("record-size", 1024, "bytes per record value")
	duration := flag.Duration("duration", 20*time.Second, "how long")
	pid := flag.Int("pid", 0, "the proxy's pid, for its CPU")
	flag.Parse()
	value := strings.Repeat("x", *size)
	var records, failed atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients, MaxConnsPerHost: *clients}}
	cpu0 := procCPU(*pid)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := requestBody(c%*partitions, *batch, c, value)
			var mine []time.Duration
			for time.Since(start) < *duration {
				t0 := time.Now()
				if post(hc, *url+"/topics/"+*topic, body) {
					records.Add(int64(*batch))
					mine = append(mine, time.Since(t0))
				} else {
					failed.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu := procCPU(*pid) - cpu0
	slices.Sort(lat)
	n := float64(records.Load())
	out := map[string]any{"records": records.Load(), "failed_requests": failed.Load(), "seconds": secs,
		"records_per_s": n / secs, "proxy_cpu_s": cpu, "proxy_us_per_record": cpu * 1e6 / n,
		"records_per_proxy_cpu_s": n / cpu}
	if len(lat) > 0 {
		out["batch_p50_ms"] = float64(lat[len(lat)/2].Microseconds()) / 1000
		out["batch_p99_ms"] = float64(lat[len(lat)*99/100].Microseconds()) / 1000
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func requestBody(partition, batch, client int, value string) []byte {
	type rec struct {
		Key       string `json:"key"`
		Value     string `json:"value"`
		Partition int    `json:"partition"`
	}
	recs := make([]rec, batch)
	for i := range recs {
		recs[i] = rec{Key: fmt.Sprintf("bridge:%d", client), Value: value, Partition: partition}
	}
	b, _ := json.Marshal(map[string]any{"records": recs})
	return b
}

func post(hc *http.Client, url string, body []byte) bool {
	resp, err := hc.Post(url, "application/vnd.kafka.json.v2+json", bytes.NewReader(body))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// procCPU is pid's user+system CPU seconds (0 without a pid).
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// debugMux serves net/http/pprof on a mux of its own (the package also
// registers itself on http.DefaultServeMux, which nothing here serves).
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug serves the profiles on addr until the returned stop is
// called. A CPU profile runs as long as its ?seconds= asks, so the write
// timeout is generous; the listener is opt-in and meant for loopback.
func serveDebug(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: debugMux(), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 5 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	log.Info("debug listener (pprof)", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

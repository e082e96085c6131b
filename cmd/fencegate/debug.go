package main

import (
	"fmt"
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

// registerDebugListen registers --debug-listen, the same for every
// command that has it (serve, materialize).
func registerDebugListen(fs *cmdFlags, addr *string) {
	fs.StringVar(addr, "debug-listen", "", "listen address of a debug listener serving net/http/pprof under /debug/pprof/ (default off; keep it on loopback)")
}

// startDebug serves the profiles on addr when it is set (a loopback
// address: checkDebugListen) until the returned stop is called.
func startDebug(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	if err := checkDebugListen(addr); err != nil {
		return nil, usagef("%v", err)
	}
	return serveDebug(addr, log)
}

// checkDebugListen refuses a debug address that is not loopback: pprof
// has no authentication and shows the process's memory profile, its
// goroutines' stacks and its command line to whoever reaches it (FM92).
// An empty host listens on every interface.
func checkDebugListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--debug-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("--debug-listen %q is not a loopback address: pprof answers anyone who reaches it, without a credential; "+
		"listen on 127.0.0.1:PORT and reach it through ssh -L or kubectl port-forward", addr)
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

# shellcheck shell=bash
# Sourced by the bench scripts.

# gateway_metrics_port FG: the port of the /metrics listener of the
# gateway child (`FG serve`) of `FG loadtest --separate-processes`.
gateway_metrics_port() {
  local fg=$1 pid port
  pid=$(pgrep -f "$fg serve" | head -1) || return 1
  for port in $(ss -ltnp | grep "pid=$pid," | awk '{print $4}' | sed 's/.*://'); do
    if curl -s -m 2 "http://127.0.0.1:$port/metrics" | grep -q '^fencegate_'; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# wait_gateway_metrics FG LOADTEST_PID: waits up to 60 s for the gateway's
# /metrics and prints its port; fails (with the harness's output, out.txt)
# if the harness ends first.
wait_gateway_metrics() {
  local fg=$1 lt=$2 port
  for _ in $(seq 1 600); do
    port=$(gateway_metrics_port "$fg") && { echo "$port"; return 0; }
    kill -0 "$lt" 2>/dev/null || { cat out.txt >&2; return 1; }
    sleep 0.1
  done
  return 1
}

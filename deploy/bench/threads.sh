#!/usr/bin/env bash
# usage: deploy/bench/threads.sh PID [SECONDS]
# Where one process's CPU goes, by thread: samples /proc/PID/task/*/schedstat
# (time on a CPU in ns, and timeslices: how often a thread was switched
# in) at the start and the end of SECONDS (default 10), and prints per
# thread group the CPU as % of one core, the threads, and the timeslices
# a second. Groups: librdkafka's threads by their names (rdk:main,
# rdk:broker*: every broker thread of every instance together, rdk:other),
# the Go runtime's busiest thread apart ("go, busiest": sysmon when many
# goroutines block in cgo calls) and the other Go threads ("go, other").
# Threads born or ended in the window count for their part in it.
# schedstat is exact where /proc/PID/task/*/stat counts scheduler ticks,
# which miss threads that wake for microseconds (librdkafka's timers).
set -euo pipefail
pid=${1:?usage: threads.sh PID [SECONDS]}
secs=${2:-10}
snap() { # "tid comm ns slices", one line a thread, read at once
  set +o pipefail
  # A thread may end between the reads (grep then exits 2): not a failure.
  { grep -H . /proc/"$pid"/task/*/comm; grep -H . /proc/"$pid"/task/*/schedstat; } 2>/dev/null |
    awk -F: '{ split($1, p, "/"); t = p[5] }
      $1 ~ /comm$/ { c[t] = substr($0, length($1) + 2); gsub(/ /, "_", c[t]); next }
      { split($2, f, " "); ns[t] = f[1]; sl[t] = f[3] }
      END { for (t in ns) if (t in c) print t, c[t], ns[t], sl[t] }'
}
t0=$(date +%s%N)
a=$(snap)
sleep "$secs"
b=$(snap)
# The window is what passed between the two reads, not SECONDS.
secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
awk -v secs="$secs" '
  FNR == NR { ns0[$1] = $3; sl0[$1] = $4; next }
  { d[$1] = $3 - ns0[$1]; s[$1] = $4 - sl0[$1]; comm[$1] = $2 }
  END {
    for (t in d) if (comm[t] !~ /^rdk:/ && d[t] > top) { top = d[t]; busiest = t }
    for (t in d) {
      g = comm[t]
      if (g ~ /^rdk:broker/) g = "rdk:broker*"; else if (g ~ /^rdk:main/) g = "rdk:main"
      else if (g ~ /^rdk:/) g = "rdk:other"; else if (t == busiest) g = "go, busiest"; else g = "go, other"
      cpu[g] += d[t]; n[g]++; sl[g] += s[t]; tcpu += d[t]; tn++
    }
    for (g in cpu) printf "  %-12s %6.2f%% of a core  %5d threads  %8.0f timeslices/s\n", g, 100 * cpu[g] / secs / 1e9, n[g], sl[g] / secs
    printf "  %-12s %6.2f%% of a core  %5d threads\n", "all", 100 * tcpu / secs / 1e9, tn
  }' <(echo "$a") <(echo "$b") | sort

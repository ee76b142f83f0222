#!/bin/bash
# Usage: xtask/scripts/scrape-latency.sh KERNELKITE_BINARY [SECONDS] [PORT] (root). Prints each
# scrape's latency and size as the session grows (frames every 10 ms, process churn).
# scrape latency of `trace --serve` against frames kept: $1 = kernelkite binary, $2 = seconds
KK=$1; S=${2:-120}; PORT=${3:-19464}; D=${TMPDIR:-/tmp}/kk-scrape-$PORT; mkdir -p "$D"
W=${KK_WORKLOAD:-$(dirname "$KK")/kk-workload}
# CHURN=0: one long-lived two-thread process only (the frames grow, the exposition not).
if [ "${CHURN:-1}" = 0 ]; then
  setsid sh -c "$W pipe_pingpong --count 1000000000 >/dev/null" &
else
  setsid sh -c "( while :; do /bin/true; sleep 0.02; done ) &
( while :; do $W pipe_pingpong --count 5000 >/dev/null; sleep 0.5; done ) &
wait" &
fi
SH=$!
sleep 0.5
$KK --interval-ms 10 trace --follow --pid $SH --serve 127.0.0.1:$PORT --duration $S -o $D/kk-scrape.json > /dev/null 2>$D/kk-scrape.err &
K=$!
sleep 3
for i in $(seq 1 $(( S / 10 - 1 ))); do
  t=$(curl -s -o $D/kk-scrape.txt -w '%{time_total}' http://127.0.0.1:$PORT/metrics)
  echo "$((i*10))s session $(grep '^kernelkite_session_duration_seconds ' $D/kk-scrape.txt | cut -d' ' -f2)s scrape ${t}s bytes $(wc -c < $D/kk-scrape.txt)"
  sleep 10
done
wait $K
kill -KILL -- -$SH
python3 -c "import json;b=json.load(open('$D/kk-scrape.json'));print('frames kept', len(b['frames']), 'processes', len({e['pid'] for e in b['lifecycle']}))"

#!/bin/bash
# Cost of a label-values request over 5,000 series written in writes spanning both shards.
# Two clickhouse-server shards (HTTP ports 8140/8141) and saltdb nodes (9191-9193) on loopback;
# 100 imports of 50 series each (every one spanning both shards), then 11 requests of
# /api/v1/label/instance/values through the writing node and a fresh one, and, given a wait,
# again once the maintenance pass settled the postings (abort horizon 2 x 30 s + 60 s).
# Prints each request set's first and median time and the CPU of the node and the shards.
# usage: bench/clickhouse_label_values.sh <saltdb binary> [settle wait in seconds, 0: none]
set -u
BIN=$1; SETTLE=${2:-0}
D=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; sleep 1; rm -rf "$D"; }
trap cleanup EXIT
for i in 0 1; do
  mkdir -p $D/ch$i
  cat > $D/ch$i/config.xml <<X
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>814$i</http_port><tcp_port>904$i</tcp_port><listen_host>127.0.0.1</listen_host>
  <path>$D/ch$i/data/</path><tmp_path>$D/ch$i/tmp/</tmp_path><user_files_path>$D/ch$i/uf/</user_files_path>
  <users_config>/etc/clickhouse-server/users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>
</yandex>
X
  (cd $D/ch$i && exec clickhouse-server --config-file=$D/ch$i/config.xml >$D/ch$i/log 2>&1) &
  PIDS+=($!)
done
CH_PIDS=("${PIDS[@]}")
for i in 0 1; do until curl -sf "http://127.0.0.1:814$i/?query=SELECT%201" >/dev/null; do sleep 0.2; done; done
URLS=http://127.0.0.1:8140,http://127.0.0.1:8141
node() { # port dir
  $BIN serve --storage clickhouse --clickhouse-url $URLS --listen 127.0.0.1:$1 --data-dir $D/$2 --maintenance-interval 5s --query-timeout 30s >$D/$2.log 2>&1 &
  PIDS+=($!); LASTPID=$!
  until curl -sf http://127.0.0.1:$1/-/ready >/dev/null; do sleep 0.2; done
}
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
node 9191 a; A=$LASTPID
python3 - <<P
import json, time, urllib.request
now = int(time.time()*1000) - 3600_000
for r in range(100):
    lines = []
    for s in range(50):
        k = r*50+s
        ts = [now + i*60_000 for i in range(10)]
        lines.append(json.dumps({"metric":{"__name__":"lv_m","instance":f"host-{k:05d}","job":"node"},"values":[float(i) for i in range(10)],"timestamps":ts}))
    req = urllib.request.Request("http://127.0.0.1:9191/api/v1/import", data="\n".join(lines).encode(), method="POST")
    urllib.request.urlopen(req).read()
P
echo "postings rows with write_id != 0 / all, per shard:" $(for i in 0 1; do curl -s "http://127.0.0.1:814$i/" --data-binary "SELECT countIf(write_id != 0), count() FROM saltdb.postings" 2>/dev/null | tr '\t' '/'; done)
measure() { # port pid label
  local url="http://127.0.0.1:$1/api/v1/label/instance/values"
  local n0=$(cpu $2) s0=$(( $(cpu ${CH_PIDS[0]}) + $(cpu ${CH_PIDS[1]}) ))
  local first=$(curl -s -o $D/out -w '%{time_total}' "$url")
  local count=$(python3 -c "import json;print(len(json.load(open('$D/out'))['data']))")
  local times=()
  for r in $(seq 10); do times+=($(curl -s -o /dev/null -w '%{time_total}' "$url")); done
  local n1=$(cpu $2) s1=$(( $(cpu ${CH_PIDS[0]}) + $(cpu ${CH_PIDS[1]}) ))
  local med=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 6p)
  echo "$3: values=$count first=${first}s median-of-10-next=${med}s node-cpu=$(( (n1-n0)*10 ))ms/11req shards-cpu=$(( (s1-s0)*10 ))ms/11req"
}
measure 9191 $A "writer node"
node 9192 b; B=$LASTPID
measure 9192 $B "fresh node"
if [ "$SETTLE" != 0 ]; then
  sleep $SETTLE
  # The node may have been paused meanwhile: wait until the shards hold no unsettled row.
  for t in $(seq 300); do
    n=$(for i in 0 1; do curl -s "http://127.0.0.1:814$i/" --data-binary "SELECT countIf(write_id != 0) FROM saltdb.postings"; done | paste -sd+ | bc)
    m=$(for i in 0 1; do curl -s "http://127.0.0.1:814$i/" --data-binary "SELECT count() FROM system.mutations WHERE NOT is_done"; done | paste -sd+ | bc)
    [ "$n" = 0 ] && [ "$m" = 0 ] && break
    sleep 1
  done
  sleep 6
  echo "after settle: postings rows with write_id != 0 / all, per shard:" $(for i in 0 1; do curl -s "http://127.0.0.1:814$i/" --data-binary "SELECT countIf(write_id != 0), count() FROM saltdb.postings"| tr '\t' '/'; done)
  node 9193 c; C=$LASTPID
  measure 9193 $C "fresh node after settle"
  measure 9191 $A "writer node after settle"
fi

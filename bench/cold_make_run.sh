#!/usr/bin/env bash
# Time a cold `make run` on a fresh clone: until the demo dashboard's login page answers 200.
# Usage: bench/cold_make_run.sh PORT [VAR=value ...]
#   bench/cold_make_run.sh 8000                      # with PostgreSQL and Redis on localhost
#   bench/cold_make_run.sh 8001 DEVSTACK_PG_PROBE=127.0.0.1:1 DEVSTACK_REDIS_PROBE=127.0.0.1:1
#                                                    # nothing answers: embedded services
# Then it checks the admin login page, sends Ctrl-C and counts the processes left behind.
set -u
port=$1; shift
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)/tickwork
git clone -q "$repo" "$dir" && cd "$dir" || exit 1
log=$(mktemp)
start=$(date +%s.%N)
setsid env "$@" PORT="$port" make run > "$log" 2>&1 &
pid=$!
code=000
for _ in $(seq 1200); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: demo.localhost:$port" "http://127.0.0.1:$port/login/")
  [ "$code" = "200" ] && break
  sleep 0.5
done
end=$(date +%s.%N)
echo "login page HTTP $code after $(echo "$end - $start" | bc) s"
echo "admin login page HTTP $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/admin/login/")"
sleep 5
grep -E "\[devstack\]|took the lease" "$log" | head -4
kill -INT -- "-$pid"; sleep 8
echo "processes left after Ctrl-C: $(ps -eo args= | grep -F "$dir" | grep -vc grep)"
echo "clone left in $dir (a second make run there reuses its .venv and .data)"

#!/bin/sh
# tests/fuzz/run.sh — runs each libFuzzer harness for SECONDS on its seed corpus.
#
#   sh tests/fuzz/run.sh SECONDS build-fuzz/fuzz/fuzz_proto ...
#
# The committed seeds (tests/fuzz/corpus/<name>/) are read, never written: new
# inputs go to $BUILD/fuzz/corpus/<name>/, crashes to $BUILD/fuzz/crashes/.
# Every committed seed is run first, so an input that once crashed a harness
# and was added to its corpus is a regression test from then on. One line per
# harness with its executions; exit 1 if any harness found a crash.
set -u

BUILD=${BUILD:-build-fuzz}
SECONDS_EACH=$1
shift
failed=0

for bin in "$@"; do
	name=$(basename "$bin")
	seeds=tests/fuzz/corpus/$name
	work=$BUILD/fuzz/corpus/$name
	crashes=$BUILD/fuzz/crashes
	log=$BUILD/fuzz/logs/$name.log
	mkdir -p "$seeds" "$work" "$crashes" "$(dirname "$log")"
	# -timeout: one input running this long is a hang (the session harness
	# aborts itself after 10 s of broker silence first).
	# -detect_leaks=1: LeakSanitizer after every input too (the session
	# harness waits for the broker to free each session before it returns).
	"$bin" -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=4096 -detect_leaks=1 \
		-print_final_stats=1 -artifact_prefix="$crashes/$name-" \
		"$work" "$seeds" >"$log" 2>&1 </dev/null
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
	if [ "$rc" -eq 0 ]; then
		printf 'FUZZ OK   %-14s %ss: %s execs (%s/s), %s, corpus %s seeds + %s new\n' \
			"$name" "$SECONDS_EACH" "${execs:-?}" "${rate:-?}" "${cov:-cov: ?}" \
			"$(ls "$seeds" | wc -l)" "$(ls "$work" | wc -l)"
	else
		failed=$((failed + 1))
		printf 'FUZZ FAIL %-14s exit %s after %s execs; log %s\n' "$name" "$rc" \
			"${execs:-?}" "$log"
		grep -E 'ERROR|SUMMARY|runtime error|Test unit written|abort' "$log" | head -n 20 | \
			sed 's/^/    /'
	fi
done
# The session harness runs a broker in-process; a crash leaves its segments.
ls /dev/shm 2>/dev/null | grep "^wsync\.$(id -u)\.fz[0-9]" | sed 's|^|/dev/shm/|' | xargs -r rm -rf
[ "$failed" -eq 0 ]

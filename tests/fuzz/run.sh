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
#
# WSYNC_FUZZ_JOBS harnesses run at a time (default: the cores, at most 2):
# a harness keeps one core busy, so two on two cores each execute about as
# many inputs as alone, in half the time for the four.
set -u

BUILD=${BUILD:-build-fuzz}
SECONDS_EACH=$1
shift
JOBS=${WSYNC_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $JOBS in
''|*[!0-9]*|0) echo "fuzz/run.sh: WSYNC_FUZZ_JOBS must be a positive number, not '$JOBS'" >&2; exit 2 ;;
esac
[ -n "${WSYNC_FUZZ_JOBS:-}" ] || [ "$JOBS" -le 2 ] || JOBS=2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsync-fuzz.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT

# fuzz_one BIN: one harness; its line goes to $TMP/<name>.out, and
# $TMP/<name>.failed marks a finding
fuzz_one() {
	bin=$1
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
		touch "$TMP/$name.failed"
		printf 'FUZZ FAIL %-14s exit %s after %s execs; log %s\n' "$name" "$rc" \
			"${execs:-?}" "$log"
		grep -E 'ERROR|SUMMARY|runtime error|Test unit written|abort' "$log" | head -n 20 | \
			sed 's/^/    /'
	fi >"$TMP/$name.out"
}

# In groups of JOBS: every harness runs SECONDS, so a group ends together.
# Lines in the order given.
set -- "$@" --
group=
while [ "$1" != -- ]; do
	fuzz_one "$1" &
	group="$group $1"
	shift
	if [ "$(echo $group | wc -w)" -ge "$JOBS" ] || [ "$1" = -- ]; then
		wait
		for bin in $group; do
			cat "$TMP/$(basename "$bin").out"
		done
		group=
	fi
done
failed=$(ls "$TMP" | grep -c '\.failed$')
# The session harness runs a broker in-process; a crash leaves its segments.
ls /dev/shm 2>/dev/null | grep "^wsync\.$(id -u)\.fz[0-9]" | sed 's|^|/dev/shm/|' | xargs -r rm -rf
[ "$failed" -eq 0 ]

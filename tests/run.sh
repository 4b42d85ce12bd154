#!/bin/sh
# tests/run.sh — runs test programs one after another, each with a time limit.
#
#   sh tests/run.sh build/tests/unit/test_layout build/tests/integ/pubsub_basic ...
#
# A test is a program: exit 0 passes, 77 skips, anything else fails. Its output
# goes to $BUILD/tests/logs/<kind>/<name>.log. One line per test, then a
# closing "N passed, N failed, N skipped" line; the exit status is 1 if any
# test failed or timed out.
#
# Environment: BUILD (default build), WSYNC_TEST_TIMEOUT (seconds, default 60).
# Tests run sequentially: they start real processes and wait on each other,
# and CI has two cores.
set -u

BUILD=${BUILD:-build}
LIMIT=${WSYNC_TEST_TIMEOUT:-60}
LOGDIR=$BUILD/tests/logs
export BUILD

if [ $# -eq 0 ]; then
	echo "usage: sh tests/run.sh TEST_BINARY..." >&2
	exit 2
fi

case $LIMIT in
''|*[!0-9]*) echo "run.sh: WSYNC_TEST_TIMEOUT must be whole seconds, not '$LIMIT'" >&2; exit 2 ;;
esac

now_ns() { date +%s%N; }

# "1234567890" ns -> "1.23s"
fmt_secs() {
	printf '%d.%02ds' $(($1 / 1000000000)) $((($1 / 10000000) % 100))
}

# build/tests/unit/test_layout -> unit/layout; build/tests/integ/abort -> integ/abort
test_name() {
	kind=$(basename "$(dirname "$1")")
	base=$(basename "$1")
	base=${base#test_}
	echo "$kind/$base"
}

shm_entries() {
	ls /dev/shm 2>/dev/null | grep "^wsync\.$(id -u)\.t[0-9]" || true
}

passed=0
failed=0
skipped=0

for bin in "$@"; do
	name=$(test_name "$bin")
	log=$LOGDIR/$name.log
	mkdir -p "$(dirname "$log")"
	before=$(shm_entries)
	start=$(now_ns)
	if [ ! -x "$bin" ]; then
		echo "$bin: not found or not executable" >"$log"
		rc=127
	else
		timeout -k 5 "$LIMIT" "$bin" >"$log" 2>&1 </dev/null
		rc=$?
	fi
	took=$(fmt_secs $(($(now_ns) - start)))
	case $rc in
	0)
		passed=$((passed + 1))
		printf 'PASS     %-28s %s\n' "$name" "$took"
		;;
	77)
		skipped=$((skipped + 1))
		printf 'SKIP     %-28s %s\n' "$name" "$took"
		tail -n 1 "$log" | sed 's/^/    /'
		;;
	124|137)
		failed=$((failed + 1))
		printf 'TIMEOUT  %-28s %s (limit %ss)\n' "$name" "$took" "$LIMIT"
		tail -n 30 "$log" | sed 's/^/    /'
		;;
	*)
		failed=$((failed + 1))
		printf 'FAIL     %-28s %s (exit %s)\n' "$name" "$took" "$rc"
		tail -n 30 "$log" | sed 's/^/    /'
		;;
	esac
	# A test must not leave shared-memory segments behind; say so if it did.
	after=$(shm_entries)
	if [ "$after" != "$before" ]; then
		if [ -z "$before" ]; then
			new=$after
		else
			new=$(printf '%s\n' "$after" | grep -vxF "$before" || true)
		fi
		[ -n "$new" ] && printf '%s\n' "$new" | sed 's/^/    leftover in \/dev\/shm: /'
	fi
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

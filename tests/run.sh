#!/bin/sh
# tests/run.sh — runs test programs, two at a time, each with a time limit.
#
#   sh tests/run.sh build/tests/unit/test_layout build/tests/integ/pubsub_basic ...
#
# A test is a program: exit 0 passes, 77 skips, anything else fails. Its output
# goes to $BUILD/tests/logs/<kind>/<name>.log. One line per test as it ends,
# with its wall time, then a closing "N passed, N failed, N skipped" line; the
# exit status is 1 if any test failed or timed out.
#
# Environment: BUILD (default build), WSYNC_TEST_TIMEOUT (seconds, default 60),
# WSYNC_TEST_JOBS (tests at a time, default 2, 1 on a one-core machine),
# WSYNC_TEST_SOLO (the tests that run alone, default the list below).
#
# Most tests start a broker and a few client processes that mostly wait on
# each other, so two of them share CI's two cores well. The tests named in
# SOLO run alone, one after another, once the others are done: they assert
# timings or ratios of timings against a load they create themselves. The
# others' deadlines are seconds: they pass under TSan, several times slower.
set -u
set -f    # the SOLO patterns are matched with case, never expanded

BUILD=${BUILD:-build}
LIMIT=${WSYNC_TEST_TIMEOUT:-60}
LOGDIR=$BUILD/tests/logs
export BUILD

# Each entry: why it cannot share the machine.
#   budget_*, hostile_*   an honest client's round trip measured against a
#                         hostile uid's load (3x + 300 us, ratios of p50s)
#   move_off_loop         the loop's share of a 128 MiB move, commit p50s
#   move_queue            commit round trips while six moves queue up
#   name_collisions       colliding names at most 10x plain ones
#   wait_spin             a 20 ms wait returns within 400 ms while spinning
#   acked_settle          an ack settles its publisher's wait before the poll
#   deadlines, broker_stalled, wait_timeout, live_bounds
#                         100-250 ms deadlines kept within a bound
SOLO_DEFAULT='integ/budget_* integ/hostile_* integ/move_off_loop integ/name_collisions
	integ/move_queue integ/wait_spin integ/acked_settle integ/deadlines integ/broker_stalled
	integ/wait_timeout integ/live_bounds'
SOLO=${WSYNC_TEST_SOLO-$SOLO_DEFAULT}
# The longest of the others start first, so that the short ones fill the
# other lane meanwhile instead of one of these running alone at the end.
LONG='integ/bench_smoke integ/fault_soak_short integ/collector_moves integ/sharded'

if [ -z "${WSYNC_TEST_JOBS:-}" ]; then
	JOBS=2
	[ "$(nproc 2>/dev/null || echo 2)" -lt 2 ] && JOBS=1
else
	JOBS=$WSYNC_TEST_JOBS
fi

if [ $# -eq 0 ]; then
	echo "usage: sh tests/run.sh TEST_BINARY..." >&2
	exit 2
fi

case $LIMIT in
''|*[!0-9]*) echo "run.sh: WSYNC_TEST_TIMEOUT must be whole seconds, not '$LIMIT'" >&2; exit 2 ;;
esac
case $JOBS in
''|*[!0-9]*|0) echo "run.sh: WSYNC_TEST_JOBS must be a positive number, not '$JOBS'" >&2; exit 2 ;;
esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsync-run.XXXXXX") || exit 2
LANES=
trap 'rm -rf "$TMP"' EXIT
trap '[ -n "$LANES" ] && kill $LANES 2>/dev/null; exit 130' INT TERM

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

is_solo() {
	for pat in $SOLO; do
		case $1 in
		$pat) return 0 ;;
		esac
	done
	return 1
}

shm_entries() {
	ls /dev/shm 2>/dev/null | grep "^wsync\.$(id -u)\.t[0-9]" || true
}

# run_test N BIN: runs one test, then prints its lines in one piece (two
# lanes print between each other's tests, never inside them). Its result
# (pass, fail, skip) is appended to $TMP/results.
run_test() {
	id=$1 bin=$2
	name=$(test_name "$bin")
	log=$LOGDIR/$name.log
	out=$TMP/out.$id
	mkdir -p "$(dirname "$log")"
	start=$(now_ns)
	if [ ! -x "$bin" ]; then
		echo "$bin: not found or not executable" >"$log"
		rc=127
	else
		# the test's pid names its brokers' segments (t<pid>-<n>)
		timeout -k 5 "$LIMIT" sh -c 'echo $$ >"$0"; exec "$1"' "$TMP/pid.$id" "$bin" \
			>"$log" 2>&1 </dev/null
		rc=$?
	fi
	took=$(fmt_secs $(($(now_ns) - start)))
	case $rc in
	0)
		echo pass >>"$TMP/results"
		printf 'PASS     %-28s %s\n' "$name" "$took" >"$out"
		;;
	77)
		echo skip >>"$TMP/results"
		printf 'SKIP     %-28s %s\n' "$name" "$took" >"$out"
		tail -n 1 "$log" | sed 's/^/    /' >>"$out"
		;;
	124|137)
		echo fail >>"$TMP/results"
		printf 'TIMEOUT  %-28s %s (limit %ss)\n' "$name" "$took" "$LIMIT" >"$out"
		tail -n 30 "$log" | sed 's/^/    /' >>"$out"
		;;
	*)
		echo fail >>"$TMP/results"
		printf 'FAIL     %-28s %s (exit %s)\n' "$name" "$took" "$rc" >"$out"
		tail -n 30 "$log" | sed 's/^/    /' >>"$out"
		;;
	esac
	# A test must not leave shared-memory segments behind; say so if it did.
	# Only its own brokers' (named for its pid): the other lane's test, or
	# another run on the machine, may have some of its own at the moment.
	pid=$(cat "$TMP/pid.$id" 2>/dev/null)
	if [ -n "$pid" ]; then
		shm_entries | grep "^wsync\.$(id -u)\.t$pid-" |
			sed 's/^/    leftover in \/dev\/shm: /' >>"$out"
	fi
	until mkdir "$TMP/print" 2>/dev/null; do
		sleep 0.01
	done
	cat "$out"
	rmdir "$TMP/print"
}

# lane: takes the next test of $TMP/shared nobody took yet, until none is left
lane() {
	i=0
	while IFS= read -r bin; do
		i=$((i + 1))
		mkdir "$TMP/took.$i" 2>/dev/null || continue
		run_test "p$i" "$bin"
	done <"$TMP/shared"
}

: >"$TMP/shared"
: >"$TMP/results"
for long in 1 0; do
	for bin in "$@"; do
		name=$(test_name "$bin")
		is_solo "$name" && continue
		case " $LONG " in
		*" $name "*) [ "$long" = 1 ] && printf '%s\n' "$bin" >>"$TMP/shared" ;;
		*) [ "$long" = 0 ] && printf '%s\n' "$bin" >>"$TMP/shared" ;;
		esac
	done
done

if [ "$JOBS" -gt 1 ]; then
	j=0
	while [ "$j" -lt "$JOBS" ]; do
		lane &
		LANES="$LANES $!"
		j=$((j + 1))
	done
	wait
	LANES=
else
	lane
fi

n=0
for bin in "$@"; do
	n=$((n + 1))
	is_solo "$(test_name "$bin")" && run_test "s$n" "$bin"
done

passed=$(grep -c '^pass$' "$TMP/results")
failed=$(grep -c '^fail$' "$TMP/results")
skipped=$(grep -c '^skip$' "$TMP/results")
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

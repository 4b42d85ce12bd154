#!/bin/sh
# tests/layering_test.sh — tests/layering.sh can fail: it rejects a folder
# whose two files call each other, a loop of three, two headers that
# include each other (one of them through -I, from another folder), and a
# folder without its objects; and it passes a folder that reads from the
# bottom up. The fixtures are written and compiled (with $CC) into a
# temporary directory.
#
#   CC=cc sh tests/layering_test.sh
set -u

CC=${CC:-cc}
CHECK=$(cd "$(dirname "$0")" && pwd -P)/layering.sh
TMP=$(mktemp -d "${TMPDIR:-/tmp}/layering-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
failed=0
n=0

# put FILE TEXT: writes a fixture file under $TMP
put() {
	mkdir -p "$TMP/$(dirname "$1")"
	printf '%s\n' "$2" >"$TMP/$1"
}

# build DIR: compiles DIR/*.c into obj/DIR/
build() {
	mkdir -p "$TMP/obj/$1"
	for c in "$TMP/$1"/*.c; do
		if ! $CC -c -I"$TMP" -o "$TMP/obj/$1/$(basename "$c" .c).o" "$c"; then
			echo "layering self-test: cannot compile the fixture $1/$(basename "$c") with $CC"
			exit 1
		fi
	done
}

# expect STATUS WHAT PATTERN... -- ARGS...: runs the check in $TMP with ARGS;
# its exit status must be STATUS and its output must hold every PATTERN
# (fixed strings).
expect() {
	want=$1 what=$2
	shift 2
	pats=
	while [ "$1" != -- ]; do
		pats="$pats
$1"
		shift
	done
	shift
	n=$((n + 1))
	out=$(cd "$TMP" && sh "$CHECK" "$@" 2>&1)
	rc=$?
	bad=
	[ "$rc" -eq "$want" ] || bad="exit $rc, expected $want"
	printf '%s\n' "$pats" | while IFS= read -r p; do
		[ -z "$p" ] && continue
		printf '%s\n' "$out" | grep -qF -- "$p" || echo "missing: $p"
	done >"$TMP/missing"
	[ -s "$TMP/missing" ] && bad="$bad $(tr '\n' ' ' <"$TMP/missing")"
	if [ -n "$bad" ]; then
		failed=$((failed + 1))
		echo "layering self-test: FAIL $what: $bad"
		printf '%s\n' "$out" | sed 's/^/    /'
	fi
}

# Two files that call each other.
put pair/a.c 'int pair_b(int n); int pair_a(int n) { return n ? pair_b(n - 1) : 0; }'
put pair/b.c 'int pair_a(int n); int pair_b(int n) { return n ? pair_a(n - 1) : 1; }'
build pair
expect 1 "two files that call each other" \
	"a loop of 2 files" "pair/a.c -> pair/b.c  (pair_b)" "pair/b.c -> pair/a.c  (pair_a)" \
	-- -o obj pair

# A loop of three, and a file outside it that only calls in.
put ring/a.c 'int ring_b(void); int ring_a(void) { return ring_b(); }'
put ring/b.c 'int ring_c(void); int ring_b(void) { return ring_c(); }'
put ring/c.c 'int ring_a(void); int ring_c(void) { return ring_a(); }'
put ring/top.c 'int ring_a(void); int ring_top(void) { return ring_a(); }'
build ring
expect 1 "a loop of three files" \
	"a loop of 3 files" "ring/a.c -> ring/b.c" "ring/b.c -> ring/c.c" "ring/c.c -> ring/a.c" \
	"every file in it: ring/a.c ring/b.c ring/c.c" \
	-- -o obj ring

# Two headers of two folders that include each other: one by a path from
# the -I directory, the other relative to itself. (No .c files: nothing to
# link, so only the include graph is looked at.)
put up/x.h '#pragma once
#include "down/y.h"'
put down/y.h '#pragma once
#include "../up/x.h"'
expect 1 "headers that include each other" \
	"#include among the headers of up down" "up/x.h -> down/y.h" "down/y.h -> up/x.h" \
	-- -o obj -I . up down

# The same headers without -I: "down/y.h" is not found next to up/x.h, so
# there is no edge and no loop.
expect 0 "an include that does not resolve" "no include or call cycles" -- -o obj up down

# Bottom up: a calls b, b calls nothing here; a.h includes b.h.
put flat/a.h '#include "b.h"'
put flat/b.h 'int flat_b(void);'
put flat/a.c '#include "a.h"
int flat_a(void) { return flat_b(); }'
put flat/b.c 'int flat_b(void) { return 1; }'
build flat
expect 0 "a folder that reads from the bottom up" "flat: no include or call cycles" -- -o obj flat

# Objects not built.
mkdir -p "$TMP/unbuilt"
put unbuilt/a.c 'int unbuilt_a(void) { return 0; }'
expect 2 "a folder without objects" "no objects of unbuilt" -- -o obj unbuilt

if [ "$failed" -ne 0 ]; then
	echo "layering self-test: $failed of $n checks failed"
	exit 1
fi
echo "layering self-test: $n checks passed"

/*
 * faulty_latest — a publisher that forges its model page's `latest` (or the
 * page's flags) hurts nobody else: collectors never take a version the
 * broker did not grant and never see versions go down; within a
 * housekeeping tick the broker repairs the word; the model goes on at
 * versions above everything seen, with the same publisher or a new one,
 * also after a clean broker restart (the forged number is never kept).
 * Cases: a version far above anything granted, exactly the largest version,
 * a forged word overwritten by the next honest commit, a forged "closed"
 * flag. A publisher that breaks the protocol (a COMMIT not matching its
 * grant) loses the publishing role only: the same client's subscription to
 * another model goes on, and its stale publisher handle refuses to write.
 */
#include "tests/lib/harness.h"

#include <limits.h>
#include <stdatomic.h>
#include <unistd.h>

#include "libclient/pub.h"
#include "shm/futex.h"

static struct broker B;

/* What one collector saw so far; every view must be above the last. */
struct watcher {
	wsync_client *c;
	wsync_sub *s;
	uint64_t seen;
};

static void watch_open(struct watcher *w, const char *name, const char *model)
{
	TEST_OK(harness_connect(&B, name, &w->c));
	TEST_OK(wsync_sub_open(w->c, model, &w->s));
	w->seen = 0;
}

/* Takes the newest view (if any), checks it and that it did not go down. */
static uint64_t watch_look(struct watcher *w, uint64_t hwm_bound)
{
	wsync_view v;
	int rc = wsync_sub_acquire(w->s, &v);

	if (rc == -ENODATA || rc == -EAGAIN)
		return w->seen;
	TEST_OK(rc);
	TEST_ASSERT_MSG(v.version >= w->seen, "version went down: v%llu after v%llu",
	                (unsigned long long)v.version, (unsigned long long)w->seen);
	TEST_ASSERT_MSG(v.version <= hwm_bound, "took v%llu, above anything granted (%llu)",
	                (unsigned long long)v.version, (unsigned long long)hwm_bound);
	TEST_ASSERT(harness_verify_view(&v) == 0);
	w->seen = v.version;
	wsync_sub_release(w->s, &v);
	return w->seen;
}

static const struct wsync_ctl_model *entry_of(wsync_client *c, const char *model)
{
	for (uint32_t i = 0; i < WSYNC_MAX_MODELS; i++) {
		const struct wsync_ctl_model *e = client_ctl_model(c, i);

		if (atomic_load(&e->state) != WSYNC_MODEL_FREE && !strcmp(e->name, model))
			return e;
	}
	TEST_ASSERT_MSG(0, "model %s not in the control segment", model);
	return NULL;
}

static void forge(wsync_pub *p, uint64_t word)
{
	struct wsync_model_page *pg = p->page;

	atomic_store(&pg->latest, word);
	atomic_fetch_add(&pg->seq, 1);
	wsync_futex_wake(&pg->seq, INT32_MAX);
}

/* Waits until the broker repaired the page's latest (its tick). */
static void expect_repaired(wsync_pub *p)
{
	int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;

	while (atomic_load(&p->page->latest) != atomic_load(&p->entry->latest)) {
		TEST_ASSERT_MSG(harness_mono_ns() < deadline, "model %s: the forged latest is "
		                "still there after 10 s", p->model);
		harness_sleep_ms(20);
	}
}

/* Waits until the broker took the publishing role away. */
static void expect_cut_off(wsync_client *c, const char *model)
{
	const struct wsync_ctl_model *e = entry_of(c, model);
	int64_t deadline = harness_mono_ns() + 10 * HARNESS_S;

	while (atomic_load(&e->publisher) != 0) {
		TEST_ASSERT_MSG(harness_mono_ns() < deadline,
		                "model %s: the forging publisher still publishes after 10 s", model);
		harness_sleep_ms(20);
	}
}

static void forged_case(const char *model, uint64_t forged_version, uint32_t forged_slot)
{
	wsync_client *t = NULL, *t2 = NULL;
	wsync_pub *p = NULL, *p2 = NULL;
	struct watcher w, late;
	uint64_t v = 0, before;
	wsync_view view;
	wsync_slab slab;

	TEST_OK(harness_connect(&B, "forger", &t));
	TEST_OK(harness_pub_open_2t(t, model, 3, &p));
	watch_open(&w, "watcher", model);
	for (uint64_t step = 1; step <= 3; step++)
		TEST_OK(harness_publish(p, step, HARNESS_S, &v));
	before = watch_look(&w, v);
	TEST_EQ_U64(before, v);

	forge(p, wsync_latest_pack(forged_version, forged_slot));
	/* collectors, old and new, never take the forged word */
	watch_open(&late, "late-watcher", model);
	for (int i = 0; i < 50; i++) {
		TEST_EQ_U64(watch_look(&w, v), before);
		TEST_EQ_U64(watch_look(&late, v), before);
	}
	TEST_RC(wsync_sub_wait(w.s, before, 0, &view), -ETIMEDOUT);
	expect_repaired(p);
	TEST_ASSERT(watch_look(&w, v) >= before);
	/* the same publisher goes on, above everything seen */
	TEST_OK(wsync_pub_begin(p, HARNESS_S, &slab));
	harness_fill(slab.base, slab.bytes, 5);
	TEST_OK(wsync_pub_commit(p, 5, &v));
	TEST_OK(wsync_sub_wait(w.s, w.seen, 2 * HARNESS_S, &view));
	TEST_EQ_U64(view.version, v);
	w.seen = view.version;
	wsync_sub_release(w.s, &view);
	wsync_pub_close(p);

	/* a new publisher: versions above everything seen, and waiters wake */
	TEST_OK(harness_connect(&B, "honest", &t2));
	TEST_OK(harness_pub_open_2t(t2, model, 3, &p2));
	for (uint64_t step = 10; step <= 14; step++) {
		TEST_OK(harness_publish(p2, step, HARNESS_S, &v));
		TEST_OK(wsync_sub_wait(w.s, w.seen, 2 * HARNESS_S, &view));
		TEST_ASSERT(view.version > w.seen && view.version <= v);
		TEST_ASSERT(harness_verify_view(&view) == 0);
		w.seen = view.version;
		wsync_sub_release(w.s, &view);
		watch_look(&late, v);
	}
	TEST_ASSERT_MSG(atomic_load(&entry_of(t2, model)->hwm_version) < 1000,
	                "the forged word raised the version counter to %llu",
	                (unsigned long long)atomic_load(&entry_of(t2, model)->hwm_version));
	wsync_pub_close(p2);
	wsync_close(t2);
	wsync_close(t);
	wsync_close(w.c);
	wsync_close(late.c);
}

/* The forged word lives only until the next honest commit overwrites it. */
static void transient_case(void)
{
	wsync_client *t = NULL;
	wsync_pub *p = NULL;
	struct watcher w;
	uint64_t v = 0, last = 0;

	TEST_OK(harness_connect(&B, "flicker", &t));
	TEST_OK(harness_pub_open_2t(t, "faulty.transient", 3, &p));
	watch_open(&w, "watcher", "faulty.transient");
	for (uint64_t step = 1; step <= 30; step++) {
		int rc = harness_publish(p, step, HARNESS_S, &v);

		if (rc)   /* the tick may have caught a forged word: cut off */
			break;
		last = v;
		watch_look(&w, last);
		forge(p, wsync_latest_pack(last + 1000000, 0));
		watch_look(&w, last);
	}
	TEST_ASSERT(w.seen > 0);
	wsync_close(t);
	wsync_close(w.c);
}

/* The page's flags are the publisher's to write: they shut nothing down. */
static void closed_flag_case(void)
{
	wsync_client *t = NULL;
	wsync_pub *p = NULL;
	struct watcher w, late;
	wsync_view view;
	uint64_t v = 0;

	TEST_OK(harness_connect(&B, "closer", &t));
	TEST_OK(harness_pub_open_2t(t, "faulty.closed", 2, &p));
	watch_open(&w, "watcher", "faulty.closed");
	TEST_OK(harness_publish(p, 1, HARNESS_S, &v));
	atomic_fetch_or(&p->page->flags, WSYNC_PAGE_CLOSED);
	forge(p, atomic_load(&p->page->latest));   /* wake everyone */
	watch_open(&late, "late-watcher", "faulty.closed");
	TEST_EQ_U64(watch_look(&w, v), v);
	TEST_EQ_U64(watch_look(&late, v), v);
	TEST_OK(harness_publish(p, 2, HARNESS_S, &v));
	TEST_OK(wsync_sub_wait(late.s, 1, 2 * HARNESS_S, &view));
	TEST_EQ_U64(view.version, v);
	wsync_sub_release(late.s, &view);
	wsync_close(t);
	wsync_close(w.c);
	wsync_close(late.c);
}

/* A client that publishes one model and reads another: forging on the one
 * costs it the publishing role only. */
static void only_role_cut_case(void)
{
	wsync_client *both = NULL, *other = NULL;
	wsync_pub *mine = NULL, *theirs = NULL;
	wsync_sub *s = NULL;
	wsync_view view;
	uint64_t v = 0;

	TEST_OK(harness_connect(&B, "other-trainer", &other));
	TEST_OK(harness_pub_open_2t(other, "faulty.theirs", 2, &theirs));
	TEST_OK(harness_publish(theirs, 1, HARNESS_S, &v));
	TEST_OK(harness_connect(&B, "both", &both));
	TEST_OK(wsync_sub_open(both, "faulty.theirs", &s));
	TEST_OK(harness_pub_open_2t(both, "faulty.mine", 2, &mine));
	TEST_OK(harness_publish(mine, 1, HARNESS_S, NULL));
	{
		/* a COMMIT for a version never granted */
		union wsync_msg_any m;

		wsync_msg_init(&m.hdr, WSYNC_MSG_COMMIT, 0);
		m.commit.m.model_id = mine->model_id;
		m.commit.slot = 0;
		m.commit.version = 1u << 20;
		m.commit.step = 1;
		client_lock(both);
		TEST_OK(wsync_conn_post(both, &m));
		client_unlock(both);
	}
	expect_cut_off(both, "faulty.mine");
	{
		wsync_slab slab;
		int rc = wsync_pub_begin(mine, HARNESS_S, &slab);

		TEST_ASSERT_MSG(rc == -EPROTO, "a cut-off publisher handle began a slab: %d", rc);
		TEST_CONTAINS(wsync_errmsg(), "cut this publisher off");
	}
	TEST_OK(wsync_sub_acquire(s, &view));
	TEST_OK(wsync_view_check(&view));
	wsync_sub_release(s, &view);
	TEST_OK(harness_publish(theirs, 2, HARNESS_S, &v));
	TEST_OK(wsync_sub_wait(s, 1, 2 * HARNESS_S, &view));
	TEST_EQ_U64(view.version, v);
	TEST_ASSERT(harness_verify_view(&view) == 0);
	wsync_sub_release(s, &view);
	wsync_close(both);
	wsync_close(other);
}

int main(void)
{
	if (harness_broker_start(&B, NULL))
		return 1;
	forged_case("faulty.high", (UINT64_C(1) << 56) - 1, 0);
	forged_case("faulty.max", (UINT64_C(1) << 56) - 2, 1);
	transient_case();
	closed_flag_case();
	only_role_cut_case();

	/* the versions a forger wrote are not kept across a clean restart */
	TEST_ASSERT(harness_broker_stop(&B) == 0);
	TEST_ASSERT(harness_broker_restart(&B) == 0);
	{
		wsync_client *c = NULL;
		wsync_pub *p = NULL;
		uint64_t v = 0;

		TEST_OK(harness_connect(&B, "after-restart", &c));
		TEST_OK(harness_pub_open_2t(c, "faulty.max", 3, &p));
		TEST_OK(harness_publish(p, 1, HARNESS_S, &v));
		TEST_ASSERT_MSG(v < 1000, "after a restart the model publishes at v%llu",
		                (unsigned long long)v);
		wsync_close(c);
	}
	harness_broker_finish(&B);
	return 0;
}

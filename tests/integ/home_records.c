/*
 * home_records — a thread's home hazard record (libclient/sub.c) is taken
 * without a CAS and given back when it is no longer used: many short-lived
 * threads acquiring through one client never see -EAGAIN, and once they
 * are gone one thread holds WSYNC_MAX_VIEWS views again; a view released by
 * another thread than its acquirer, a thread holding two views, a thread
 * that exits while another holds its view, and a thread moving between two
 * clients all leave the records free; with more live threads than homes
 * the others still claim records. Also: the broker advertises the pin
 * barrier and the client uses it (not under TSan), and an acquire stamps
 * its record with the broker's tick time.
 */
#include "tests/lib/harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "libclient/client.h"
#include "shm/layout.h"

#define SHORT_THREADS  256      /* short-lived threads, a few at a time */
#define SHORT_AT_ONCE  8
#define LIVE_THREADS   (HZ_HOMES_MAX + 8)

static struct broker B;
static wsync_client *C;
static wsync_sub *S;
static uint64_t V;              /* the version published */

/* Every record of C is free: one thread holds WSYNC_MAX_VIEWS views. */
static void all_free(wsync_client *c, wsync_sub *s, const char *when)
{
	static wsync_view v[WSYNC_MAX_VIEWS];

	for (int i = 0; i < WSYNC_MAX_VIEWS; i++) {
		int rc = wsync_sub_acquire(s, &v[i]);

		TEST_ASSERT_MSG(rc == 0, "%s: view %d of %d: %d (%s)", when, i + 1,
		                WSYNC_MAX_VIEWS, rc, wsync_errmsg());
	}
	for (int i = 0; i < WSYNC_MAX_VIEWS; i++) {
		TEST_ASSERT(harness_verify_view(&v[i]) == 0);
		wsync_sub_release(s, &v[i]);
	}
	for (uint32_t i = 0; i < WSYNC_MAX_VIEWS; i++) {
		struct wsync_sub *o = atomic_load(&c->hz[i].owner);

		TEST_ASSERT_MSG(o == NULL || o == HZ_IDLE, "%s: record %u still held", when, i);
		TEST_ASSERT_MSG(atomic_load(&c->session->hazards[i].pin) == 0,
		                "%s: record %u still pinned", when, i);
	}
}

struct short_arg {
	int n;                      /* acquires */
	bool keep_one;              /* exits holding a view, handed to main */
	wsync_view kept;
	int err;
};

static void *short_thread(void *argp)
{
	struct short_arg *a = argp;
	wsync_view v, w;

	for (int i = 0; i < a->n; i++) {
		if ((a->err = wsync_sub_acquire(S, &v)))
			return NULL;
		/* every other round also a second view: the home is busy */
		if (i % 2 && (a->err = wsync_sub_acquire(S, &w)))
			return NULL;
		if (harness_verify_view(&v) || v.version != V)
			a->err = -EIO;
		if (i % 2)
			wsync_sub_release(S, &w);
		wsync_sub_release(S, &v);
	}
	if (a->keep_one)
		a->err = wsync_sub_acquire(S, &a->kept);
	return NULL;
}

/* Pools of short-lived threads: their homes come back at exit, also those
 * whose view another thread released after they exited. */
static void short_lived(void)
{
	static struct short_arg args[SHORT_AT_ONCE];
	pthread_t t[SHORT_AT_ONCE];

	for (int round = 0; round < SHORT_THREADS / SHORT_AT_ONCE; round++) {
		for (int k = 0; k < SHORT_AT_ONCE; k++) {
			args[k] = (struct short_arg){ .n = 16, .keep_one = k % 4 == 0 };
			TEST_ASSERT(pthread_create(&t[k], NULL, short_thread, &args[k]) == 0);
		}
		for (int k = 0; k < SHORT_AT_ONCE; k++) {
			TEST_ASSERT(pthread_join(t[k], NULL) == 0);
			TEST_ASSERT_MSG(args[k].err == 0, "round %d thread %d: %d (%s)", round, k,
			                args[k].err, wsync_strerror(args[k].err));
		}
		/* the views their threads left: released here, after the exit */
		for (int k = 0; k < SHORT_AT_ONCE; k++)
			if (args[k].keep_one) {
				TEST_ASSERT(harness_verify_view(&args[k].kept) == 0);
				wsync_sub_release(S, &args[k].kept);
			}
	}
	TEST_ASSERT_MSG(atomic_load(&C->n_homes) <= 1, "%u homes left after the threads exited",
	                atomic_load(&C->n_homes));
	all_free(C, S, "after short-lived threads");
}

/* ---- a view handed to another thread for release --------------------------- */

struct handoff {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	wsync_view v;
	int full, done, err;
};

static void *releaser(void *argp)
{
	struct handoff *h = argp;

	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (!h->full && !h->done)
			pthread_cond_wait(&h->cv, &h->mu);
		if (!h->full)
			break;
		if (harness_verify_view(&h->v))
			h->err = -EIO;
		wsync_sub_release(S, &h->v);
		h->full = 0;
		pthread_cond_broadcast(&h->cv);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void handed_off(void)
{
	struct handoff h = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	pthread_t t;

	TEST_ASSERT(pthread_create(&t, NULL, releaser, &h) == 0);
	for (int i = 0; i < 2000; i++) {
		wsync_view v;

		TEST_OK(wsync_sub_acquire(S, &v));
		pthread_mutex_lock(&h.mu);
		while (h.full)
			pthread_cond_wait(&h.cv, &h.mu);
		h.v = v;
		h.full = 1;
		pthread_cond_broadcast(&h.cv);
		pthread_mutex_unlock(&h.mu);
	}
	pthread_mutex_lock(&h.mu);
	while (h.full)
		pthread_cond_wait(&h.cv, &h.mu);
	h.done = 1;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.mu);
	TEST_ASSERT(pthread_join(t, NULL) == 0);
	TEST_OK(h.err);
	all_free(C, S, "after views released by another thread");
}

/* ---- more live threads than homes ----------------------------------------- */

struct live {
	pthread_barrier_t took, go;
	int err[LIVE_THREADS];
};

static struct live L;

static void *live_thread(void *argp)
{
	int i = (int)(intptr_t)argp;
	wsync_view v;

	L.err[i] = wsync_sub_acquire(S, &v);
	if (!L.err[i])
		wsync_sub_release(S, &v);
	pthread_barrier_wait(&L.took);     /* its home idle, it still lives */
	pthread_barrier_wait(&L.go);
	return NULL;
}

static void more_threads_than_homes(void)
{
	static wsync_view v[WSYNC_MAX_VIEWS];
	pthread_t t[LIVE_THREADS];
	int held = 0;

	TEST_ASSERT(pthread_barrier_init(&L.took, NULL, LIVE_THREADS + 1) == 0);
	TEST_ASSERT(pthread_barrier_init(&L.go, NULL, LIVE_THREADS + 1) == 0);
	for (int i = 0; i < LIVE_THREADS; i++)
		TEST_ASSERT(pthread_create(&t[i], NULL, live_thread, (void *)(intptr_t)i) == 0);
	pthread_barrier_wait(&L.took);
	for (int i = 0; i < LIVE_THREADS; i++)
		TEST_ASSERT_MSG(L.err[i] == 0, "live thread %d: %d", i, L.err[i]);
	TEST_ASSERT_MSG(atomic_load(&C->n_homes) <= HZ_HOMES_MAX, "%u homes",
	                atomic_load(&C->n_homes));
	/* the records that are not idle homes are still there to claim */
	while (held < WSYNC_MAX_VIEWS && wsync_sub_acquire(S, &v[held]) == 0)
		held++;
	TEST_ASSERT_MSG(held >= WSYNC_MAX_VIEWS - HZ_HOMES_MAX,
	                "%d views with %d idle threads", held, LIVE_THREADS);
	for (int i = 0; i < held; i++)
		wsync_sub_release(S, &v[i]);
	pthread_barrier_wait(&L.go);
	for (int i = 0; i < LIVE_THREADS; i++)
		TEST_ASSERT(pthread_join(t[i], NULL) == 0);
	pthread_barrier_destroy(&L.took);
	pthread_barrier_destroy(&L.go);
	all_free(C, S, "after more threads than homes");
}

/* ---- one thread, two clients ----------------------------------------------- */

static void two_clients(void)
{
	wsync_client *c2 = NULL;
	wsync_sub *s2 = NULL;

	TEST_OK(harness_connect(&B, "home-2", &c2));
	TEST_OK(wsync_sub_open(c2, "home.m", &s2));
	for (int i = 0; i < 500; i++) {
		wsync_view a, b;

		TEST_OK(wsync_sub_acquire(S, &a));
		TEST_OK(wsync_sub_acquire(s2, &b));
		TEST_EQ_U64(a.version, b.version);
		wsync_sub_release(S, &a);
		wsync_sub_release(s2, &b);
	}
	TEST_ASSERT_MSG(atomic_load(&C->n_homes) <= 1 && atomic_load(&c2->n_homes) <= 1,
	                "homes %u and %u", atomic_load(&C->n_homes), atomic_load(&c2->n_homes));
	all_free(C, S, "first client, after moving between two");
	all_free(c2, s2, "second client, after moving between two");
	/* a thread whose client closed moves on to the next one */
	wsync_sub_close(s2);
	wsync_close(c2);
	all_free(C, S, "after the second client closed");
}

/* ---- the pin barrier and the tick ----------------------------------------- */

static void barrier_and_tick(void)
{
	uint32_t features = atomic_load(&C->ctl->features);
	wsync_view v;

	harness_log("broker features 0x%x, pins %s", features,
	            C->pin_barrier ? "without a fence" : "seq_cst");
#ifdef WSYNC_TSAN
	TEST_ASSERT(!C->pin_barrier);
#else
	/* every kernel these tests run on has the global expedited membarrier */
	TEST_ASSERT(features & WSYNC_CTL_PIN_BARRIER);
	TEST_ASSERT(C->pin_barrier);
#endif
	TEST_OK(wsync_sub_acquire(S, &v));
	int64_t tick = atomic_load(&C->ctl->tick_ns);
	TEST_ASSERT(tick > 0);
	TEST_EQ_U64((uint64_t)atomic_load(&C->session->hazards[v.priv_hazard].since_ns),
	            (uint64_t)tick);
	TEST_ASSERT(tick <= harness_mono_ns());
	wsync_sub_release(S, &v);
}

int main(void)
{
	wsync_client *pc = NULL;
	wsync_pub *p = NULL;

	TEST_ASSERT(harness_broker_start(&B, NULL) == 0);
	TEST_OK(harness_connect(&B, "home-pub", &pc));
	TEST_OK(harness_pub_open_2t(pc, "home.m", 0, &p));
	TEST_OK(harness_publish(p, 1, HARNESS_S, &V));
	TEST_OK(harness_connect(&B, "home", &C));
	TEST_OK(wsync_sub_open(C, "home.m", &S));

	barrier_and_tick();
	short_lived();
	handed_off();
	more_threads_than_homes();
	two_clients();

	wsync_sub_close(S);
	wsync_close(C);
	wsync_pub_close(p);
	wsync_close(pc);
	harness_broker_finish(&B);
	return 0;
}

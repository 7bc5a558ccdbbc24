// SPDX-License-Identifier: GPL-2.0
/*
 * loadgen: an open-loop Redis load generator that records every request.
 *
 *   loadgen [--host H --port P | --socket PATH] --rate R --duration S
 *           [--clients C] [--keys N] [--dist uniform|gauss[:SIGMA]|hot[:F:P]]
 *           [--set-ratio X] [--value-size B] [--seed N] [--out FILE]
 *           [--set-log FILE] [--tag STR]
 *
 * Requests are scheduled at a fixed rate R (per second, over all C
 * connections, each connection in its own phase), whatever the server does:
 * a request is sent at its intended time, or at once if that time has passed
 * (a stall delays sending too), and its latency is measured from its
 * intended time, so a stall is counted for every request it delays (no
 * coordinated omission).  Replies come back in order on each connection, so
 * a FIFO per connection matches them with their intended times.
 *
 * Keys are "key:<n>", n in [0, N): uniform; gauss (mean N/2, standard
 * deviation SIGMA*N, default 0.1); hot (a fraction F of the keys, default
 * 0.01, gets a fraction P of the requests, default 0.9).  A request is a
 * SET of a B-byte value with probability X, a GET otherwise.  Connection
 * c only uses the keys n with n % C == c, and the value of its request
 * number s is "<tag>c<c>:s<s>:" padded to B bytes, so that the dataset at any
 * instant is a known function of how many requests of each connection the
 * server had processed: a snapshot can be checked exactly.
 *
 * Output (FILE, default stdout): a header line
 *   # loadgen start_realtime_ns=<ns> start_monotonic_ns=<ns> rate=<R> ...
 * then one line per answered request, in the order the replies came:
 *   <intended_us> <latency_us> <S|G>
 * intended_us counts from the start, measured on CLOCK_MONOTONIC (the start
 * in both clocks: a tracefs instance with trace_clock "mono" lines up).  --set-log FILE gets one line per
 * answered SET, "<conn> <seq> <key n> <append_ns> <reply_ns>" (CLOCK_REALTIME:
 * when it was handed to the connection, when its reply was read).  A
 * summary goes to stderr.  SIGTERM or SIGINT ends the run early: nothing
 * more is sent, and what was sent is waited for as at the end.  A
 * connection error, a server error reply or requests left unanswered 10 s
 * after the end are reported and make the exit status non-zero.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define DRAIN_NS	(10ULL * 1000000000ULL)
#define CONNECT_S	5

enum dist { UNIFORM, GAUSS, HOT };
static const char *const dist_name[] = { "uniform", "gauss", "hot" };

struct pending {
	uint64_t intended;	/* ns since the start */
	uint64_t appended;	/* ns since the start */
	uint64_t seq;		/* request number on its connection */
	long key;
	char op;
};

struct conn {
	redisContext *c;
	uint64_t next;		/* intended time of its next request */
	uint64_t seq;		/* requests appended so far */
	struct pending *fifo;	/* outstanding requests, a ring */
	size_t head, count, cap;
};

struct record {
	uint64_t intended;
	uint64_t latency;
	char op;
};

struct set_record {
	uint64_t seq, appended, replied;
	long key;
	unsigned int conn;
};

static struct {
	const char *host, *socket, *out, *set_log, *tag;
	int port;
	double rate, duration, set_ratio, sigma, hot_keys, hot_prob;
	long clients, keys, value_size;
	enum dist dist;
	uint64_t seed;
} opt = {
	.host = "127.0.0.1", .port = 6379, .clients = 8, .keys = 1000000,
	.set_ratio = 0.5, .value_size = 100, .dist = UNIFORM, .sigma = 0.1,
	.hot_keys = 0.01, .hot_prob = 0.9, .seed = 1, .tag = "",
};

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t rng_state;

static uint64_t rng(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static double rng_unit(void)
{
	return (rng() >> 11) * (1.0 / 9007199254740992.0);
}

static long pick_key(void)
{
	switch (opt.dist) {
	case GAUSS:
		for (;;) {
			/* Box-Muller; redraw what falls outside the key space. */
			double u = rng_unit(), v = rng_unit();
			double z = sqrt(-2 * log(u > 0 ? u : 1e-300)) * cos(2 * M_PI * v);
			double k = opt.keys / 2.0 + z * opt.sigma * opt.keys;

			if (k >= 0 && k < opt.keys)
				return (long)k;
		}
	case HOT: {
		long hot = (long)(opt.hot_keys * opt.keys);

		if (hot < 1)
			hot = 1;
		if (rng_unit() < opt.hot_prob || hot >= opt.keys)
			return rng() % hot;
		return hot + rng() % (opt.keys - hot);
	}
	default:
		return rng() % opt.keys;
	}
}

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void usage(const char *msg)
{
	if (msg)
		fprintf(stderr, "loadgen: %s\n", msg);
	fprintf(stderr,
		"usage: loadgen [--host H --port P | --socket PATH] --rate R --duration S\n"
		"               [--clients C] [--keys N] [--dist uniform|gauss[:SIGMA]|hot[:F:P]]\n"
		"               [--set-ratio X] [--value-size B] [--seed N] [--out FILE]\n"
		"               [--set-log FILE] [--tag STR]\n");
	exit(2);
}

static double num(const char *name, const char *s, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "loadgen: --%s: '%s' is not a number in [%g, %g]\n",
			name, s, min, max);
		exit(2);
	}
	return v;
}

static void parse_dist(const char *s)
{
	char *copy = strdup(s), *kind = strtok(copy, ":");
	char *a = strtok(NULL, ":"), *b = strtok(NULL, ":");

	if (!kind)
		usage("--dist: empty");
	if (!strcmp(kind, "uniform") && !a) {
		opt.dist = UNIFORM;
	} else if (!strcmp(kind, "gauss") && !b) {
		opt.dist = GAUSS;
		if (a)
			opt.sigma = num("dist gauss:SIGMA", a, 1e-6, 10);
	} else if (!strcmp(kind, "hot")) {
		opt.dist = HOT;
		if (a)
			opt.hot_keys = num("dist hot:F", a, 1e-9, 1);
		if (b)
			opt.hot_prob = num("dist hot:F:P", b, 0, 1);
	} else {
		usage("--dist must be uniform, gauss[:SIGMA] or hot[:F:P]");
	}
	free(copy);
}

static void parse(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "host", required_argument, NULL, 'h' },
		{ "port", required_argument, NULL, 'p' },
		{ "socket", required_argument, NULL, 'u' },
		{ "rate", required_argument, NULL, 'r' },
		{ "duration", required_argument, NULL, 'd' },
		{ "clients", required_argument, NULL, 'c' },
		{ "keys", required_argument, NULL, 'k' },
		{ "dist", required_argument, NULL, 'D' },
		{ "set-ratio", required_argument, NULL, 's' },
		{ "value-size", required_argument, NULL, 'v' },
		{ "seed", required_argument, NULL, 'S' },
		{ "out", required_argument, NULL, 'o' },
		{ "set-log", required_argument, NULL, 'L' },
		{ "tag", required_argument, NULL, 'T' },
		{ }
	};
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'h': opt.host = optarg; break;
		case 'p': opt.port = num("port", optarg, 1, 65535); break;
		case 'u': opt.socket = optarg; break;
		case 'r': opt.rate = num("rate", optarg, 1, 1e7); break;
		case 'd': opt.duration = num("duration", optarg, 0.001, 86400); break;
		case 'c': opt.clients = num("clients", optarg, 1, 1024); break;
		case 'k': opt.keys = num("keys", optarg, 1, 1e10); break;
		case 'D': parse_dist(optarg); break;
		case 's': opt.set_ratio = num("set-ratio", optarg, 0, 1); break;
		case 'v': opt.value_size = num("value-size", optarg, 1, 1 << 26); break;
		case 'S': opt.seed = num("seed", optarg, 0, 1e18); break;
		case 'o': opt.out = optarg; break;
		case 'L': opt.set_log = optarg; break;
		case 'T': opt.tag = optarg; break;
		default: usage(NULL);
		}
	}
	if (optind != argc)
		usage("unexpected argument");
	if (!opt.rate || !opt.duration)
		usage("--rate and --duration are required");
	if (opt.clients > opt.rate * opt.duration)
		usage("fewer requests in all than --clients");
	if (opt.clients > opt.keys)
		usage("fewer --keys than --clients");
	if (opt.value_size < 32 + (long)strlen(opt.tag))
		usage("--value-size must be at least 32 plus the tag (the value names its request)");
}

/* Double an array of *cap elements of @size bytes; NULL (said) if no memory. */
static void *grow(void *a, uint64_t *cap, size_t size)
{
	void *n = realloc(a, 2 * *cap * size);

	if (!n) {
		fprintf(stderr, "loadgen: out of memory for %llu records\n",
			(unsigned long long)(2 * *cap));
		return NULL;
	}
	*cap *= 2;
	return n;
}

static redisContext *connect_one(void)
{
	struct timeval tv = { .tv_sec = CONNECT_S };
	redisContext *c;

	c = opt.socket ? redisConnectUnixWithTimeout(opt.socket, tv) :
			 redisConnectWithTimeout(opt.host, opt.port, tv);
	if (!c || c->err) {
		if (opt.socket)
			fprintf(stderr, "loadgen: cannot connect to %s: %s\n", opt.socket,
				c ? c->errstr : "out of memory");
		else
			fprintf(stderr, "loadgen: cannot connect to %s:%d: %s\n", opt.host,
				opt.port, c ? c->errstr : "out of memory");
		exit(1);
	}
	/* From now on the event loop below waits, never hiredis. */
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK)) {
		perror("loadgen: fcntl");
		exit(1);
	}
	c->flags &= ~REDIS_BLOCK;
	return c;
}

static void conn_error(long i, redisContext *c, const char *what)
{
	fprintf(stderr, "loadgen: connection %ld: %s: %s\n", i, what,
		c->errstr[0] ? c->errstr : strerror(errno));
	exit(1);
}

int main(int argc, char **argv)
{
	uint64_t interval, end, start_mono, start_real, recorded = 0, rec_cap;
	uint64_t deadline, errors = 0, sent = 0, nsets = 0, sets_cap;
	struct set_record *sets;
	struct record *rec;
	struct pollfd *pfd;
	struct conn *conns;
	char *value, key[32];
	FILE *out = stdout;
	long i;

	parse(argc, argv);
	rng_state = opt.seed * 0x9e3779b97f4a7c15ULL + 1;
	value = malloc(opt.value_size);
	conns = calloc(opt.clients, sizeof(*conns));
	pfd = calloc(opt.clients, sizeof(*pfd));
	/* Room for a minute at the most; grown as needed. */
	rec_cap = sets_cap = (uint64_t)(opt.rate * fmin(opt.duration, 60)) + opt.clients;
	rec = malloc(rec_cap * sizeof(*rec));
	sets = malloc(sets_cap * sizeof(*sets));
	if (!value || !conns || !pfd || !rec || !sets) {
		fprintf(stderr, "loadgen: out of memory\n");
		return 1;
	}
	memset(value, 'v', opt.value_size);
	if (opt.out && !(out = fopen(opt.out, "w"))) {
		fprintf(stderr, "loadgen: %s: %s\n", opt.out, strerror(errno));
		return 1;
	}

	/* Connection i sends at i/R, (i + C)/R, ...: R per second in all. */
	interval = (uint64_t)(1e9 * opt.clients / opt.rate);
	for (i = 0; i < opt.clients; i++) {
		struct conn *k = &conns[i];

		k->c = connect_one();
		k->next = (uint64_t)(1e9 * i / opt.rate);
		k->cap = 1024;
		k->fifo = malloc(k->cap * sizeof(*k->fifo));
		if (!k->fifo) {
			fprintf(stderr, "loadgen: out of memory\n");
			return 1;
		}
		pfd[i].fd = k->c->fd;
	}

	end = (uint64_t)(opt.duration * 1e9);
	deadline = end + DRAIN_NS;
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	start_real = now_ns(CLOCK_REALTIME);
	start_mono = now_ns(CLOCK_MONOTONIC);
	for (;;) {
		uint64_t t = now_ns(CLOCK_MONOTONIC) - start_mono, wake = deadline;
		size_t outstanding = 0;
		int timeout_ms;

		if (stop && end > t) {
			end = t;
			deadline = end + DRAIN_NS;
		}

		/* Send everything that is due, late or not. */
		for (i = 0; i < opt.clients; i++) {
			struct conn *k = &conns[i];
			int done;

			while (k->next < end && k->next <= t) {
				char op = rng_unit() < opt.set_ratio ? 'S' : 'G';
				long n = pick_key();
				int ret;

				/* This connection's key next to n. */
				n = n - n % opt.clients + i;
				if (n >= opt.keys)
					n -= opt.clients;
				snprintf(key, sizeof(key), "key:%ld", n);
				if (op == 'S') {
					int len = snprintf(value, opt.value_size, "%sc%ld:s%llu:",
							   opt.tag, i,
							   (unsigned long long)k->seq);

					memset(value + len, 'v', opt.value_size - len);
					ret = redisAppendCommand(k->c, "SET %s %b", key, value,
								 (size_t)opt.value_size);
				} else {
					ret = redisAppendCommand(k->c, "GET %s", key);
				}
				if (ret != REDIS_OK)
					conn_error(i, k->c, "append");
				if (k->count == k->cap) {
					struct pending *f = malloc(2 * k->cap * sizeof(*f));

					if (!f) {
						fprintf(stderr, "loadgen: out of memory\n");
						return 1;
					}
					for (size_t j = 0; j < k->count; j++)
						f[j] = k->fifo[(k->head + j) % k->cap];
					free(k->fifo);
					k->fifo = f;
					k->head = 0;
					k->cap *= 2;
				}
				k->fifo[(k->head + k->count++) % k->cap] =
					(struct pending){ k->next, t, k->seq, n, op };
				k->seq++;
				k->next += interval;
				sent++;
			}
			if (redisBufferWrite(k->c, &done) != REDIS_OK)
				conn_error(i, k->c, "write");
			pfd[i].events = POLLIN | (done ? 0 : POLLOUT);
			outstanding += k->count;
			if (k->next < end && k->next < wake)
				wake = k->next;
		}
		if (t >= end && !outstanding)
			break;
		if (t >= deadline) {
			fprintf(stderr, "loadgen: %zu requests unanswered %llu s after the end\n",
				outstanding, (unsigned long long)(DRAIN_NS / 1000000000ULL));
			return 1;
		}
		timeout_ms = wake > t ? (int)((wake - t + 999999) / 1000000) : 0;
		if (poll(pfd, opt.clients, timeout_ms) < 0 && errno != EINTR) {
			perror("loadgen: poll");
			return 1;
		}
		t = now_ns(CLOCK_MONOTONIC) - start_mono;
		for (i = 0; i < opt.clients; i++) {
			struct conn *k = &conns[i];
			redisReply *r;

			if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			if (redisBufferRead(k->c) != REDIS_OK)
				conn_error(i, k->c, "read");
			for (;;) {
				void *reply = NULL;
				struct pending p;

				if (redisGetReplyFromReader(k->c, &reply) != REDIS_OK)
					conn_error(i, k->c, "protocol");
				if (!reply)
					break;
				r = reply;
				if (r->type == REDIS_REPLY_ERROR && errors++ < 5)
					fprintf(stderr, "loadgen: server error: %s\n", r->str);
				freeReplyObject(r);
				if (!k->count) {
					fprintf(stderr, "loadgen: a reply nobody asked for\n");
					return 1;
				}
				p = k->fifo[k->head];
				k->head = (k->head + 1) % k->cap;
				k->count--;
				if (recorded == rec_cap &&
				    !(rec = grow(rec, &rec_cap, sizeof(*rec))))
					return 1;
				rec[recorded++] = (struct record){
					p.intended, t - p.intended, p.op };
				if (p.op != 'S')
					continue;
				if (nsets == sets_cap &&
				    !(sets = grow(sets, &sets_cap, sizeof(*sets))))
					return 1;
				sets[nsets++] = (struct set_record){
					p.seq, start_real + p.appended,
					start_real + t, p.key, i };
			}
		}
	}

	fprintf(out, "# loadgen start_realtime_ns=%llu start_monotonic_ns=%llu rate=%g "
		"duration=%g clients=%ld keys=%ld dist=%s sigma=%g hot_keys=%g hot_prob=%g "
		"set_ratio=%g value_size=%ld seed=%llu\n",
		(unsigned long long)start_real, (unsigned long long)start_mono, opt.rate,
		end / 1e9, opt.clients,
		opt.keys, dist_name[opt.dist], opt.sigma, opt.hot_keys, opt.hot_prob,
		opt.set_ratio, opt.value_size,
		(unsigned long long)opt.seed);
	for (uint64_t j = 0; j < recorded; j++)
		fprintf(out, "%.1f %.1f %c\n", rec[j].intended / 1e3,
			rec[j].latency / 1e3, rec[j].op);
	if (fclose(out)) {
		perror("loadgen: output");
		return 1;
	}
	if (opt.set_log) {
		FILE *f = fopen(opt.set_log, "w");

		if (!f) {
			fprintf(stderr, "loadgen: %s: %s\n", opt.set_log, strerror(errno));
			return 1;
		}
		for (uint64_t j = 0; j < nsets; j++)
			fprintf(f, "%u %llu %ld %llu %llu\n", sets[j].conn,
				(unsigned long long)sets[j].seq, sets[j].key,
				(unsigned long long)sets[j].appended,
				(unsigned long long)sets[j].replied);
		if (fclose(f)) {
			perror("loadgen: set log");
			return 1;
		}
	}
	fprintf(stderr, "loadgen: %llu requests sent, %llu answered, %llu errors\n",
		(unsigned long long)sent, (unsigned long long)recorded,
		(unsigned long long)errors);
	return errors ? 1 : 0;
}

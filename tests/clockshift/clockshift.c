/*
 * clockshift: an LD_PRELOAD library that shifts a process's wall clock at run time, for tests
 * of clock jumps and clock rates on real redis-server processes.
 *
 * CLOCK_REALTIME* readings (clock_gettime, gettimeofday, time) are offset by what the file
 * named by $CLOCKSHIFT_FILE says; a missing, empty or unreadable file means no offset. Two
 * forms:
 *
 *   <ms>                        a fixed offset in milliseconds (signed decimal);
 *   <ms> <ppm> <anchor_ns>      an offset of <ms> (signed, up to 6 fraction digits) at the real
 *                               wall-clock instant <anchor_ns> (ns since the epoch, unshifted),
 *                               growing by <ppm> (signed parts per million) of the real time
 *                               elapsed since: the clock runs at 1 + ppm/1e6 of the true rate.
 *
 * The file is re-read at most once per millisecond of monotonic time, so a test changes the
 * offset or the rate of a running server by rewriting it (write a temporary file and rename it
 * over, so no partial content is ever read). CLOCK_MONOTONIC and the other clocks are left
 * alone.
 *
 * Why not libfaketime: it deadlocks with the jemalloc of Debian's redis-server (dlsym and its
 * own start-up allocate). This library never allocates and never calls dlsym: it reaches the
 * kernel through syscall(2), which bypasses the vDSO (slower, but only in tests).
 *
 * Threads and signal handlers may read the clock while another re-reads the file: the parsed
 * settings are published as one slot of a ring (an atomic index), never edited in place, and
 * a slot is reused only after SLOTS later changes of the file.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct setting {
    long long base_ns;   /* the offset at anchor_ns */
    long long ppm;       /* rate of the offset's growth, parts per million */
    long long anchor_ns; /* real CLOCK_REALTIME, ns */
};

#define SLOTS 64
static struct setting slots[SLOTS];
static int current; /* index into slots, published with release order */
static char rereading;
static volatile long long checked_at_ns = -1;

static long long mono_ns(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A signed decimal with up to 6 fraction digits, scaled by 1e6 (ms -> ns); NULL if none. */
static const char *parse_scaled(const char *p, long long *out) {
    while (*p == ' ' || *p == '\t' || *p == '\n') {
        p++;
    }
    int neg = 0;
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    if (*p < '0' || *p > '9') {
        return NULL;
    }
    long long whole = 0;
    while (*p >= '0' && *p <= '9') {
        whole = whole * 10 + (*p++ - '0');
    }
    long long frac = 0;
    int digits = 0;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (digits < 6) {
                frac = frac * 10 + (*p - '0');
                digits++;
            }
            p++;
        }
    }
    while (digits++ < 6) {
        frac *= 10;
    }
    long long v = whole * 1000000LL + frac;
    *out = neg ? -v : v;
    return p;
}

static const char *parse_int(const char *p, long long *out) {
    while (*p == ' ' || *p == '\t' || *p == '\n') {
        p++;
    }
    int neg = 0;
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    if (*p < '0' || *p > '9') {
        return NULL;
    }
    long long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
    }
    *out = neg ? -v : v;
    return p;
}

static void reread(void) {
    struct setting s = {0, 0, 0};
    const char *path = getenv("CLOCKSHIFT_FILE");
    if (path != NULL) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[96];
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n > 0) {
                buf[n] = '\0';
                const char *p = parse_scaled(buf, &s.base_ns);
                if (p == NULL) {
                    s.base_ns = 0;
                } else if ((p = parse_int(p, &s.ppm)) == NULL || parse_int(p, &s.anchor_ns) == NULL) {
                    s.ppm = 0; /* the one-number form */
                }
            }
        }
    }
    int i = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
    struct setting *c = &slots[i];
    if (c->base_ns == s.base_ns && c->ppm == s.ppm && (s.ppm == 0 || c->anchor_ns == s.anchor_ns)) {
        return;
    }
    int next = (i + 1) % SLOTS;
    slots[next] = s;
    __atomic_store_n(&current, next, __ATOMIC_RELEASE);
}

/* The offset at the real wall-clock instant real_ns. */
static long long offset_at(long long real_ns) {
    long long now = mono_ns();
    long long last = checked_at_ns;
    if (last < 0 || now - last >= 1000000LL) {
        /* One re-reader at a time; the others use the setting in force. */
        if (!__atomic_test_and_set(&rereading, __ATOMIC_ACQUIRE)) {
            checked_at_ns = now;
            reread();
            __atomic_clear(&rereading, __ATOMIC_RELEASE);
        }
    }
    const struct setting *s = &slots[__atomic_load_n(&current, __ATOMIC_ACQUIRE)];
    /* No overflow while |elapsed ns x ppm| < 9.2e18: ten days at 1 %. */
    return s->base_ns + (real_ns - s->anchor_ns) * s->ppm / 1000000LL;
}

static void shift(struct timespec *ts) {
    long long real = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec;
    long long ns = real + offset_at(real);
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 &&
        (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_REALTIME_ALARM)) {
        shift(ts);
    }
    return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1;
    }
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    if (tz != NULL) {
        struct timezone *z = tz;
        z->tz_minuteswest = 0;
        z->tz_dsttime = 0;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}

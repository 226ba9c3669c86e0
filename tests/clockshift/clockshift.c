/*
 * clockshift: an LD_PRELOAD library that shifts a process's wall clock at run time, for tests
 * of clock jumps on real redis-server processes.
 *
 * CLOCK_REALTIME* readings (clock_gettime, gettimeofday, time) are offset by the number of
 * milliseconds (signed decimal) in the file named by $CLOCKSHIFT_FILE; a missing or empty file
 * means no offset. The file is re-read at most once per millisecond of monotonic time, so a
 * test changes the offset of a running server by rewriting it (write a temporary file and
 * rename it over, so no partial content is ever read). CLOCK_MONOTONIC and the other clocks
 * are left alone.
 *
 * Why not libfaketime: it deadlocks with the jemalloc of Debian's redis-server (dlsym and its
 * own start-up allocate). This library never allocates and never calls dlsym: it reaches the
 * kernel through syscall(2), which bypasses the vDSO (slower, but only in tests).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile long long offset_ns;
static volatile long long checked_at_ns = -1;

static long long mono_ns(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long current_offset_ns(void) {
    long long now = mono_ns();
    long long last = checked_at_ns;
    if (last >= 0 && now - last < 1000000LL) {
        return offset_ns;
    }
    checked_at_ns = now;
    const char *path = getenv("CLOCKSHIFT_FILE");
    long long ms = 0;
    if (path != NULL) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[32];
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n > 0) {
                buf[n] = '\0';
                ms = strtoll(buf, NULL, 10);
            }
        }
    }
    offset_ns = ms * 1000000LL;
    return offset_ns;
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + current_offset_ns();
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

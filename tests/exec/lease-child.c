/* The command the `run` tests wrap (tests/suite/exec.rs): it records its own life to a file, so
 * that the checker works on the children's records, not on what the sidecars answer.
 *
 *   lease-child FILE ID MODE
 *
 * Appends "start ID PID TOKEN NS" when it starts, "beat ID PID NS" every millisecond, and
 * "stop ID PID NS" when SIGTERM stops it; NS is CLOCK_MONOTONIC in ns (one clock for every
 * process of the machine). MODE is "term" (exit 0 on SIGTERM), "ignore" (SIGTERM is ignored:
 * only SIGKILL ends it) or "exit:MS" (exit 7 by itself after MS milliseconds). Each record is one
 * write(2) to a file opened with O_APPEND, so records of concurrent children never interleave. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void record(int fd, const char *line) {
    size_t len = strlen(line);
    if (write(fd, line, len) != (ssize_t)len) {
        _exit(3);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: lease-child FILE ID term|ignore|exit:MS\n");
        return 2;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    const char *id = argv[2];
    const char *mode = argv[3];
    long long exit_after = -1;
    if (strncmp(mode, "exit:", 5) == 0) {
        exit_after = atoll(mode + 5) * 1000000LL;
    }
    if (strcmp(mode, "ignore") == 0) {
        signal(SIGTERM, SIG_IGN);
    } else {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
    }
    const char *token = getenv("REDLOCK_ELECTOR_FENCING_TOKEN");
    char line[256];
    long long start = now_ns();
    snprintf(line, sizeof line, "start %s %d %s %lld\n", id, (int)getpid(), token ? token : "-",
             start);
    record(fd, line);
    struct timespec ms = {0, 1000000};
    for (;;) {
        long long t = now_ns();
        if (stop) {
            snprintf(line, sizeof line, "stop %s %d %lld\n", id, (int)getpid(), t);
            record(fd, line);
            return 0;
        }
        if (exit_after >= 0 && t - start >= exit_after) {
            snprintf(line, sizeof line, "stop %s %d %lld\n", id, (int)getpid(), t);
            record(fd, line);
            return 7;
        }
        snprintf(line, sizeof line, "beat %s %d %lld\n", id, (int)getpid(), t);
        record(fd, line);
        nanosleep(&ms, NULL);
    }
}

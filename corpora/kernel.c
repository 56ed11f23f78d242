/* System calls whose user memory the kernel reads and writes, each followed by the ranges
 * the man pages say it touched, printed as `expect <R|W> <addr> <size>` lines: the oracle
 * tests/kernel_refs.rs holds `dep recover --kernel-refs` to (the program knows where its
 * buffers are; dep is not asked). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static void expect(char rw, const void *p, size_t n) {
    if (n > 0) printf("expect %c %p %zu\n", rw, p, n);
}

static void fail(const char *what) {
    perror(what);
    _exit(1);
}

int main(void) {
    static int fds[2], sv[2];
    static char msg[] = "hello, world", a[5], b[64], c[64], ping[] = "ping", got[64];
    static struct iovec iov[2], iov2[2];
    static struct utsname u;
    static struct timespec ts;
    static struct stat st;
    static struct msghdr out, in;
    static struct iovec oiov, iiov;
    static unsigned char rnd[16];
    static struct epoll_event ev, evs[4];

    if (pipe2(fds, 0) != 0) fail("pipe2");
    expect('W', fds, sizeof fds);

    if (write(fds[1], msg, 12) != 12) fail("write");
    expect('R', msg, 12);

    iov[0] = (struct iovec){a, sizeof a};
    iov[1] = (struct iovec){b, sizeof b};
    ssize_t n = readv(fds[0], iov, 2);
    if (n != 12) fail("readv");
    expect('R', iov, sizeof iov);
    expect('W', a, 5);
    expect('W', b, 7);

    iov2[0] = (struct iovec){"abc", 3};
    iov2[1] = (struct iovec){"defgh", 5};
    if (writev(fds[1], iov2, 2) != 8) fail("writev");
    expect('R', iov2, sizeof iov2);
    expect('R', iov2[0].iov_base, 3);
    expect('R', iov2[1].iov_base, 5);

    if (read(fds[0], c, sizeof c) != 8) fail("read");
    expect('W', c, 8);

    if (uname(&u) != 0) fail("uname");
    expect('W', &u, sizeof u);

    if (syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts) != 0) fail("clock_gettime");
    expect('W', &ts, sizeof ts);

    if (fstat(fds[0], &st) != 0) fail("fstat");
    expect('W', &st, sizeof st);

    static const char root[] = "/";
    if (stat(root, &st) != 0) fail("stat");
    expect('R', root, sizeof root);
    expect('W', &st, sizeof st);

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) fail("socketpair");
    expect('W', sv, sizeof sv);

    oiov = (struct iovec){ping, 4};
    out = (struct msghdr){.msg_iov = &oiov, .msg_iovlen = 1};
    if (sendmsg(sv[0], &out, 0) != 4) fail("sendmsg");
    expect('R', &out, sizeof out);
    expect('R', &oiov, sizeof oiov);
    expect('R', ping, 4);

    iiov = (struct iovec){got, sizeof got};
    in = (struct msghdr){.msg_iov = &iiov, .msg_iovlen = 1};
    if (recvmsg(sv[1], &in, 0) != 4) fail("recvmsg");
    expect('R', &in, sizeof in);
    expect('R', &iiov, sizeof iiov);
    expect('W', got, 4);

    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) fail("getrandom");
    expect('W', rnd, sizeof rnd);

    int ep = epoll_create1(0);
    if (ep < 0) fail("epoll_create1");
    ev = (struct epoll_event){.events = EPOLLIN, .data.fd = sv[1]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &ev) != 0) fail("epoll_ctl");
    expect('R', &ev, sizeof ev);
    if (send(sv[0], "x", 1, 0) != 1) fail("send");
    int k = epoll_wait(ep, evs, 4, 1000);
    if (k != 1) fail("epoll_wait");
    expect('W', evs, k * sizeof evs[0]);
    return 0;
}

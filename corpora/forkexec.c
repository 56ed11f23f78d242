/* Process creation: fork + work + execve of /bin/echo, and fork + re-exec of self; parent reaps and reports statuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long work(unsigned n)
{
    unsigned long s = 0;
    for (unsigned i = 0; i < n; i++) s += (i ^ (i >> 3)) * 2654435761u % 1000;
    return s;
}

static void report(const char *what, pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid) { perror("waitpid"); exit(1); }
    if (WIFEXITED(st)) printf("forkexec: parent: %s exited with status %d\n", what, WEXITSTATUS(st));
    else printf("forkexec: parent: %s ended abnormally\n", what);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) {
        /* re-exec'd image: new address space, fresh libc init */
        printf("forkexec: re-exec'd child: work=%lu\n", work(200000));
        return 7;
    }

    /* Resolve our own path before forking; tools like valgrind virtualize readlink but not exec of the link. */
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return 1;
    self[sl] = '\0';

    printf("forkexec: parent: start work=%lu\n", work(100000));
    fflush(stdout); /* don't duplicate buffered output into the child */

    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        printf("forkexec: child 1: work=%lu, exec'ing /bin/echo\n", work(50000));
        fflush(stdout);
        execl("/bin/echo", "echo", "child-exec", (char *)NULL);
        _exit(127);
    }
    report("child 1 (/bin/echo)", pid);

    pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        execl(self, argv[0], "--child", (char *)NULL);
        _exit(127);
    }
    report("child 2 (self --child)", pid);

    pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) _exit((int)(work(1000) % 50)); /* no exec: plain child exit */
    report("child 3 (_exit)", pid);

    printf("forkexec: parent: done\n");
    return 0;
}

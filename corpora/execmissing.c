/* execve of a missing file, of a directory and of a path through a file: each fails with its
   errno and the program goes on working and exits with status 5. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    char *argv[] = {"x", NULL}, *envp[] = {NULL};
    const char *paths[] = {"/nonexistent/dep-no-such-program", "/", "/etc/passwd/x"};
    unsigned long s = 1;
    for (int i = 0; i < 3; i++) {
        int r = execve(paths[i], argv, envp);
        int e = errno;
        for (unsigned j = 0; j < 50000; j++) s = s * 31 + (j ^ (s >> 9));
        printf("execve %s: %d %s\n", paths[i], r, strerror(e));
    }
    int r = execvp("dep-no-such-program-either", argv);
    printf("execvp: %d %s, work %lu\n", r, strerror(errno), s);
    return 5;
}

/* Dependences between threads for WET traces, at labelled instructions (global symbols,
 * built without PIE so run-time addresses are nm's):
 *   wet_xstore -> wet_xload      main stores a word, then creates a thread that loads it:
 *                                creation orders the two
 *   wet_ystore -> wet_yload      the thread stores a word, then hands a flag over with xchg;
 *                                main takes it with lock cmpxchg, then loads the word
 * Prints a checksum. */
#include <pthread.h>
#include <stdio.h>

unsigned long xword, yword, flag, got_x, got_y;

void *wet_child(void *arg);

__asm__(
    ".text\n"
    ".globl wet_child\n"
    ".type wet_child,@function\n"
    "wet_child:\n"
    ".globl wet_xload\n"
    "wet_xload: movq xword(%rip), %rax\n"
    "    movq %rax, got_x(%rip)\n"
    ".globl wet_ystore\n"
    "wet_ystore: movq $77, yword(%rip)\n"
    "    movl $1, %eax\n"
    ".globl wet_release\n"
    "wet_release: xchgq %rax, flag(%rip)\n"
    "    xorl %eax, %eax\n"
    "    ret\n"
    ".size wet_child,.-wet_child\n"

    ".globl wet_main_part\n"
    ".type wet_main_part,@function\n"
    "wet_main_part:\n"
    /* spin until the flag is 1, taking it back to 2 atomically */
    "1:  movl $1, %eax\n"
    "    movl $2, %ecx\n"
    ".globl wet_acquire\n"
    "wet_acquire: lock cmpxchgq %rcx, flag(%rip)\n"
    "    jne 1b\n"
    ".globl wet_yload\n"
    "wet_yload: movq yword(%rip), %rax\n"
    "    movq %rax, got_y(%rip)\n"
    "    ret\n"
    ".size wet_main_part,.-wet_main_part\n");

void wet_main_part(void);
void wet_store_x(unsigned long v);

__asm__(
    ".globl wet_store_x\n"
    ".type wet_store_x,@function\n"
    "wet_store_x:\n"
    ".globl wet_xstore\n"
    "wet_xstore: movq %rdi, xword(%rip)\n"
    "    ret\n"
    ".size wet_store_x,.-wet_store_x\n");

int main(void)
{
    pthread_t t;
    wet_store_x(41);
    if (pthread_create(&t, NULL, wet_child, NULL)) return 1;
    wet_main_part();
    pthread_join(t, NULL);
    printf("x %lu y %lu\n", got_x, got_y);
    return 0;
}

/* shadowroot: one instruction whose address needs a register's value twice over, the
 * register itself and another computed from it earlier in the block (liblzma, run by
 * xz -T2: `lea rdx,[rax+rax*4]; lea rdx,[rax+rdx*2]; mov ecx,[r15+rdx*4+...]`, then rax
 * derived again for a later address, so that rax is recorded at that load too).
 *
 * In `walk`'s loop body, rax arrives with its value not yet recorded (the block before
 * loaded it); rdx is computed from rax, the first load uses rdx through rax's shadow, and
 * rax is recorded at that load as well, because r11, computed from it next, forms the
 * second load's address. A later `add` leaves the arithmetic flags dead at the loads, so the
 * collector tests the shadows with a jump. It once set rax's shadow RECORDED in the path
 * that recorded rax, before the same step tested that shadow for rdx, and lost rdx's value:
 * recovery ran out of values. It prints one checksum. */
#include <stdint.h>
#include <stdio.h>

uint64_t walk(const uint64_t *idx, const uint32_t *t, uint64_t n);
__asm__(".text\n"
        ".globl walk\n"
        ".type walk, @function\n"
        "walk:\n"
        "  mov %rdx, %r10\n"
        "  xor %r8d, %r8d\n"
        "  xor %r9d, %r9d\n"
        "1:\n"
        "  mov %r8, %rcx\n"
        "  and $63, %rcx\n"
        "  mov (%rdi,%rcx,8), %rax\n"
        "  test %rax, %rax\n"
        "  js 3f\n"
        "  lea (%rax,%rax,4), %rdx\n"
        "  movl (%rsi,%rdx,4), %ecx\n"
        "  lea 8(%rax,%rax,2), %r11\n"
        "  addl (%rsi,%r11,4), %ecx\n"
        "  rol $5, %r9\n"
        "  add %rcx, %r9\n"
        "  inc %r8\n"
        "  cmp %r10, %r8\n"
        "  jb 1b\n"
        "3:\n"
        "  mov %r9, %rax\n"
        "  ret\n"
        ".size walk, .-walk\n");

static uint32_t table[320];
static uint64_t idx[64];

int main(void) {
    for (int i = 0; i < 320; i++) table[i] = (uint32_t)(i * 2654435761u);
    for (int i = 0; i < 64; i++) idx[i] = (uint64_t)((i * 37) % 64);
    printf("shadowroot: checksum %016llx\n", (unsigned long long)walk(idx, table, 300000));
    return 0;
}

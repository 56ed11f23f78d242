/* Dependence patterns for WET traces, each at labelled instructions (global symbols, so
 * tests find them with nm; built without PIE, so run-time addresses are nm's):
 *   wet_store -> wet_load          a store, then a load of the same 8 bytes
 *   wet_wstore, wet_bstore -> wet_wload
 *                                  an 8-byte store, a byte store into it, a load of all 8
 *   wet_branch -> wet_body         the if-body runs only when the argument is non-zero;
 *                                  wet_join, after the if, is not in the branch's region
 *   wet_branch -> wet_callee       a call inside the if-body: the callee depends on the branch
 *   wet_init, wet_loop -> wet_loop the loop's accumulator: each iteration reads the previous
 *   wet_full, wet_low -> wet_merge a byte written into rax: rax then comes from both
 *   wet_lea -> value               lea's result is the address wet_vload reads through
 *   wet_rare                       a branch whose other side never runs (its code is out of
 *                                  line, after the ret): wet_rare_join, where both sides
 *                                  meet, is not in the branch's region
 *   wet_rep -> wet_repload         rep movsb copies 16 bytes, one iteration a byte; the load
 *                                  of bytes 8-15 of the copy depends on iterations 8-15
 * The program runs each pattern a fixed number of times and prints a checksum. */
#include <stdio.h>

unsigned long slot, word, sink_;
unsigned char src_[16] = "0123456789abcdef", dst_[16];

void wet_patterns(long flag);

__asm__(
    ".text\n"
    ".globl wet_callee\n"
    ".type wet_callee,@function\n"
    "wet_callee:\n"
    "    addq $1, sink_(%rip)\n"
    "    ret\n"
    ".size wet_callee,.-wet_callee\n"

    ".globl wet_patterns\n"
    ".type wet_patterns,@function\n"
    "wet_patterns:\n"
    "    pushq %rbx\n"
    /* store then load */
    ".globl wet_store\n"
    "wet_store: movq %rdi, slot(%rip)\n"
    ".globl wet_load\n"
    "wet_load: movq slot(%rip), %rax\n"
    "    addq %rax, sink_(%rip)\n"
    /* byte store into a word, then the whole word */
    "    movq $0x1111111111111111, %rax\n"
    ".globl wet_wstore\n"
    "wet_wstore: movq %rax, word(%rip)\n"
    ".globl wet_bstore\n"
    "wet_bstore: movb $7, word+2(%rip)\n"
    ".globl wet_wload\n"
    "wet_wload: movq word(%rip), %rcx\n"
    "    addq %rcx, sink_(%rip)\n"
    /* if (flag) { body; callee(); } join: */
    "    testq %rdi, %rdi\n"
    ".globl wet_branch\n"
    "wet_branch: je wet_join\n"
    ".globl wet_body\n"
    "wet_body: addq $2, sink_(%rip)\n"
    "    call wet_callee\n"
    ".globl wet_join\n"
    "wet_join: addq $3, sink_(%rip)\n"
    /* for (i = 5; i; i--) acc += i; */
    ".globl wet_init\n"
    "wet_init: xorl %eax, %eax\n"
    "    movl $5, %ecx\n"
    ".globl wet_loop\n"
    "wet_loop: addq %rcx, %rax\n"
    "    decl %ecx\n"
    "    jnz wet_loop\n"
    "    addq %rax, sink_(%rip)\n"
    /* a byte into rax */
    ".globl wet_full\n"
    "wet_full: movq %rdi, %rax\n"
    ".globl wet_low\n"
    "wet_low: movb $9, %al\n"
    ".globl wet_merge\n"
    "wet_merge: movq %rax, %rbx\n"
    "    addq %rbx, sink_(%rip)\n"
    /* a value the profile determines */
    ".globl wet_lea\n"
    "wet_lea: leaq slot(%rip), %rbx\n"
    ".globl wet_vload\n"
    "wet_vload: movq (%rbx), %rax\n"
    "    addq %rax, sink_(%rip)\n"
    /* if (flag > 100) { never } join: */
    "    cmpq $100, %rdi\n"
    ".globl wet_rare\n"
    "wet_rare: ja wet_rare_body\n"
    ".globl wet_rare_join\n"
    "wet_rare_join: addq $5, sink_(%rip)\n"
    /* a rep string, iteration by iteration */
    "    leaq src_(%rip), %rsi\n"
    "    leaq dst_(%rip), %rdi\n"
    "    movl $16, %ecx\n"
    ".globl wet_rep\n"
    "wet_rep: rep movsb\n"
    ".globl wet_repload\n"
    "wet_repload: movq dst_+8(%rip), %rax\n"
    "    addq %rax, sink_(%rip)\n"
    "    popq %rbx\n"
    "    ret\n"
    "wet_rare_body: addq $7, sink_(%rip)\n"
    "    jmp wet_rare_join\n"
    ".size wet_patterns,.-wet_patterns\n");

int main(void)
{
    long flags[] = {1, 0, 1, 1, 0};
    for (int k = 0; k < 5; k++)
        wet_patterns(flags[k]);
    printf("sink %lu\n", sink_);
    return 0;
}

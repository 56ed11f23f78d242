/* interp: a bytecode interpreter (stack machine with locals, calls and a data memory)
 * running programs assembled at startup: a sieve of Eratosthenes, recursive Fibonacci and
 * Collatz chain lengths. Like 253.perlbmk / 254.gap: a dispatch loop over opcodes.
 *
 * usage: interp [size]               (default 3000000; 200000 runs ~0.1 s)
 *   sieve up to size, fib(20) size/20000 times, Collatz lengths of 1..size/8
 * prints: each program's result and the number of bytecodes executed.
 */
#include "common.h"
#include <string.h>

enum op {
    OP_HALT, OP_PUSH, OP_LOAD, OP_STORE, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_LT, OP_EQ,
    OP_JMP, OP_JZ, OP_JNZ, OP_ALOAD, OP_ASTORE, OP_DUP, OP_DROP, OP_INC, OP_CALL, OP_RET,
};

/* The code being assembled: ops and operands in one array of int64. */
static int64_t code[4096];
static int pc_emit;

static int emit(enum op o) {
    code[pc_emit++] = o;
    return pc_emit - 1;
}

static int emit1(enum op o, int64_t arg) {
    code[pc_emit++] = o;
    code[pc_emit++] = arg;
    return pc_emit - 2;
}

/* Labels: a jump is emitted before its target is known and patched when it is. */
static int here(void) { return pc_emit; }
static void patch(int at, int target) { code[at + 1] = target; }

#define LOCALS 8
#define MAX_DEPTH 4096
#define STACK 4096

struct frame {
    int64_t locals[LOCALS];
    int ret;
};

static uint64_t executed;

/* Runs from `entry` with `arg` pushed; returns the top of stack at HALT. */
static int64_t run(int entry, int64_t arg, int64_t *mem) {
    static struct frame frames[MAX_DEPTH];
    int64_t stack[STACK];
    int sp = 0, fp = 0, pc = entry;
    uint64_t n = 0;
    memset(&frames[0], 0, sizeof frames[0]);
    stack[sp++] = arg;
    for (;;) {
        n++;
        switch ((enum op)code[pc]) {
        case OP_HALT:
            executed += n;
            return stack[sp - 1];
        case OP_PUSH:
            stack[sp++] = code[pc + 1];
            pc += 2;
            break;
        case OP_LOAD:
            stack[sp++] = frames[fp].locals[code[pc + 1]];
            pc += 2;
            break;
        case OP_STORE:
            frames[fp].locals[code[pc + 1]] = stack[--sp];
            pc += 2;
            break;
        case OP_ADD:
            sp--;
            stack[sp - 1] += stack[sp];
            pc++;
            break;
        case OP_SUB:
            sp--;
            stack[sp - 1] -= stack[sp];
            pc++;
            break;
        case OP_MUL:
            sp--;
            stack[sp - 1] *= stack[sp];
            pc++;
            break;
        case OP_DIV:
            sp--;
            stack[sp - 1] /= stack[sp];
            pc++;
            break;
        case OP_MOD:
            sp--;
            stack[sp - 1] %= stack[sp];
            pc++;
            break;
        case OP_LT:
            sp--;
            stack[sp - 1] = stack[sp - 1] < stack[sp];
            pc++;
            break;
        case OP_EQ:
            sp--;
            stack[sp - 1] = stack[sp - 1] == stack[sp];
            pc++;
            break;
        case OP_JMP:
            pc = (int)code[pc + 1];
            break;
        case OP_JZ:
            pc = stack[--sp] == 0 ? (int)code[pc + 1] : pc + 2;
            break;
        case OP_JNZ:
            pc = stack[--sp] != 0 ? (int)code[pc + 1] : pc + 2;
            break;
        case OP_ALOAD:
            stack[sp - 1] = mem[stack[sp - 1]];
            pc++;
            break;
        case OP_ASTORE: /* ... index value -> ... */
            mem[stack[sp - 2]] = stack[sp - 1];
            sp -= 2;
            pc++;
            break;
        case OP_DUP:
            stack[sp] = stack[sp - 1];
            sp++;
            pc++;
            break;
        case OP_DROP:
            sp--;
            pc++;
            break;
        case OP_INC:
            frames[fp].locals[code[pc + 1]]++;
            pc += 2;
            break;
        case OP_CALL:
            if (fp + 1 == MAX_DEPTH) {
                fprintf(stderr, "call stack overflow\n");
                exit(1);
            }
            frames[++fp].ret = pc + 2;
            pc = (int)code[pc + 1];
            break;
        case OP_RET:
            pc = frames[fp--].ret;
            break;
        default:
            fprintf(stderr, "bad opcode %lld at %d\n", (long long)code[pc], pc);
            exit(1);
        }
    }
}

/* sieve(n): marks composites in mem[0..n), returns the number of primes below n. */
static int asm_sieve(void) {
    int entry = here();
    emit1(OP_STORE, 0); /* n */
    emit1(OP_PUSH, 2);
    emit1(OP_STORE, 1); /* i = 2 */
    int fill = here();
    emit1(OP_LOAD, 1);
    emit1(OP_LOAD, 0);
    emit(OP_LT);
    int fill_done = emit1(OP_JZ, 0);
    emit1(OP_LOAD, 1);
    emit1(OP_PUSH, 1);
    emit(OP_ASTORE); /* mem[i] = 1 */
    emit1(OP_INC, 1);
    emit1(OP_JMP, fill);
    patch(fill_done, here());
    emit1(OP_PUSH, 2);
    emit1(OP_STORE, 1);
    int outer = here();
    emit1(OP_LOAD, 1);
    emit1(OP_LOAD, 1);
    emit(OP_MUL);
    emit1(OP_LOAD, 0);
    emit(OP_LT);
    int outer_done = emit1(OP_JZ, 0); /* while i*i < n */
    emit1(OP_LOAD, 1);
    emit(OP_ALOAD);
    int not_prime = emit1(OP_JZ, 0);
    emit1(OP_LOAD, 1);
    emit1(OP_LOAD, 1);
    emit(OP_MUL);
    emit1(OP_STORE, 2); /* j = i*i */
    int inner = here();
    emit1(OP_LOAD, 2);
    emit1(OP_LOAD, 0);
    emit(OP_LT);
    int inner_done = emit1(OP_JZ, 0);
    emit1(OP_LOAD, 2);
    emit1(OP_PUSH, 0);
    emit(OP_ASTORE); /* mem[j] = 0 */
    emit1(OP_LOAD, 2);
    emit1(OP_LOAD, 1);
    emit(OP_ADD);
    emit1(OP_STORE, 2); /* j += i */
    emit1(OP_JMP, inner);
    patch(inner_done, here());
    patch(not_prime, here());
    emit1(OP_INC, 1);
    emit1(OP_JMP, outer);
    patch(outer_done, here());
    emit1(OP_PUSH, 0);
    emit1(OP_STORE, 3); /* count = 0 */
    emit1(OP_PUSH, 2);
    emit1(OP_STORE, 1);
    int count = here();
    emit1(OP_LOAD, 1);
    emit1(OP_LOAD, 0);
    emit(OP_LT);
    int count_done = emit1(OP_JZ, 0);
    emit1(OP_LOAD, 3);
    emit1(OP_LOAD, 1);
    emit(OP_ALOAD);
    emit(OP_ADD);
    emit1(OP_STORE, 3);
    emit1(OP_INC, 1);
    emit1(OP_JMP, count);
    patch(count_done, here());
    emit1(OP_LOAD, 3);
    emit(OP_HALT);
    return entry;
}

/* fib(n), recursively: the function, and an entry that calls it `reps` times. */
static int asm_fib(void) {
    int fn = here();
    emit1(OP_STORE, 0);
    emit1(OP_LOAD, 0);
    emit1(OP_PUSH, 2);
    emit(OP_LT);
    int rec = emit1(OP_JZ, 0);
    emit1(OP_LOAD, 0);
    emit(OP_RET);
    patch(rec, here());
    emit1(OP_LOAD, 0);
    emit1(OP_PUSH, 1);
    emit(OP_SUB);
    emit1(OP_CALL, fn);
    emit1(OP_LOAD, 0);
    emit1(OP_PUSH, 2);
    emit(OP_SUB);
    emit1(OP_CALL, fn);
    emit(OP_ADD);
    emit(OP_RET);
    /* entry: reps on the stack; sum += fib(20) each time */
    int entry = here();
    emit1(OP_STORE, 0); /* reps */
    emit1(OP_PUSH, 0);
    emit1(OP_STORE, 1); /* sum */
    int loop = here();
    emit1(OP_LOAD, 0);
    int done = emit1(OP_JZ, 0);
    emit1(OP_PUSH, 20);
    emit1(OP_CALL, fn);
    emit1(OP_LOAD, 1);
    emit(OP_ADD);
    emit1(OP_STORE, 1);
    emit1(OP_LOAD, 0);
    emit1(OP_PUSH, 1);
    emit(OP_SUB);
    emit1(OP_STORE, 0);
    emit1(OP_JMP, loop);
    patch(done, here());
    emit1(OP_LOAD, 1);
    emit(OP_HALT);
    return entry;
}

/* Sum of Collatz chain lengths of 1..m, and the longest, in mem[0] and mem[1]. */
static int asm_collatz(void) {
    int entry = here();
    emit1(OP_STORE, 0); /* m */
    emit1(OP_PUSH, 0);
    emit1(OP_STORE, 3); /* total */
    emit1(OP_PUSH, 0);
    emit1(OP_STORE, 4); /* longest */
    emit1(OP_PUSH, 1);
    emit1(OP_STORE, 1); /* k = 1 */
    int outer = here();
    emit1(OP_LOAD, 0);
    emit1(OP_LOAD, 1);
    emit(OP_LT);
    int outer_done = emit1(OP_JNZ, 0); /* while !(m < k) */
    emit1(OP_LOAD, 1);
    emit1(OP_STORE, 2); /* x = k */
    emit1(OP_PUSH, 0);
    emit1(OP_STORE, 5); /* steps = 0 */
    int chain = here();
    emit1(OP_LOAD, 2);
    emit1(OP_PUSH, 1);
    emit(OP_EQ);
    int chain_done = emit1(OP_JNZ, 0);
    emit1(OP_INC, 5);
    emit1(OP_LOAD, 2);
    emit1(OP_PUSH, 2);
    emit(OP_MOD);
    int odd = emit1(OP_JNZ, 0);
    emit1(OP_LOAD, 2);
    emit1(OP_PUSH, 2);
    emit(OP_DIV);
    emit1(OP_STORE, 2);
    emit1(OP_JMP, chain);
    patch(odd, here());
    emit1(OP_LOAD, 2);
    emit1(OP_PUSH, 3);
    emit(OP_MUL);
    emit1(OP_PUSH, 1);
    emit(OP_ADD);
    emit1(OP_STORE, 2);
    emit1(OP_JMP, chain);
    patch(chain_done, here());
    emit1(OP_LOAD, 3);
    emit1(OP_LOAD, 5);
    emit(OP_ADD);
    emit1(OP_STORE, 3);
    emit1(OP_LOAD, 4);
    emit1(OP_LOAD, 5);
    emit(OP_LT);
    int not_longer = emit1(OP_JZ, 0);
    emit1(OP_LOAD, 5);
    emit1(OP_STORE, 4);
    patch(not_longer, here());
    emit1(OP_INC, 1);
    emit1(OP_JMP, outer);
    patch(outer_done, here());
    emit1(OP_PUSH, 0);
    emit1(OP_LOAD, 3);
    emit(OP_ASTORE);
    emit1(OP_PUSH, 1);
    emit1(OP_LOAD, 4);
    emit(OP_ASTORE);
    emit1(OP_LOAD, 3);
    emit(OP_HALT);
    return entry;
}

int main(int argc, char **argv) {
    long size = size_arg(argc, argv, 3000000);
    int sieve = asm_sieve(), fib = asm_fib(), collatz = asm_collatz();
    int64_t *mem = xmalloc((size_t)(size + 2) * sizeof *mem);
    uint64_t h = FNV_INIT;

    int64_t primes = run(sieve, size, mem);
    h = mix(h, (uint64_t)primes);
    printf("sieve: %lld primes below %ld\n", (long long)primes, size);

    long reps = size / 20000 > 0 ? size / 20000 : 1;
    int64_t fsum = run(fib, reps, mem);
    h = mix(h, (uint64_t)fsum);
    printf("fib: %ld x fib(20) = %lld\n", reps, (long long)fsum);

    int64_t total = run(collatz, size / 8 > 0 ? size / 8 : 1, mem);
    h = mix(h, (uint64_t)total);
    h = mix(h, (uint64_t)mem[1]);
    printf("collatz: 1..%ld total %lld steps, longest %lld\n", size / 8 > 0 ? size / 8 : 1, (long long)total, (long long)mem[1]);

    printf("interp: %llu bytecodes executed, checksum %016llx\n", (unsigned long long)executed, (unsigned long long)h);
    free(mem);
    return 0;
}

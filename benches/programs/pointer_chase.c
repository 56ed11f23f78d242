/* pointer_chase: linked data structures as in 181.mcf: a linked list laid out in random
 * memory order walked repeatedly, an unbalanced binary search tree built, searched and
 * traversed, and arcs of a network whose node potentials are relaxed through pointers.
 *
 * usage: pointer_chase [nodes]       (default 400000; 60000 runs ~0.1 s)
 * prints: checksums of each phase.
 */
#include "common.h"
#include <string.h>

struct item {
    struct item *next;
    uint64_t value;
    char pad[48]; /* one node per cache line */
};

struct tnode {
    struct tnode *left, *right;
    uint64_t key;
    uint64_t count;
};

struct node {
    int64_t potential;
    struct arc *first_out;
    struct node *pred;
    int64_t depth;
};

struct arc {
    struct node *tail, *head;
    struct arc *next_out;
    int64_t cost;
    int64_t flow;
};

static struct tnode *tree_insert(struct tnode *root, uint64_t key) {
    struct tnode **link = &root;
    while (*link) {
        if (key == (*link)->key) {
            (*link)->count++;
            return root;
        }
        link = key < (*link)->key ? &(*link)->left : &(*link)->right;
    }
    struct tnode *t = xmalloc(sizeof *t);
    t->left = t->right = NULL;
    t->key = key;
    t->count = 1;
    *link = t;
    return root;
}

static const struct tnode *tree_find(const struct tnode *t, uint64_t key) {
    while (t && t->key != key) t = key < t->key ? t->left : t->right;
    return t;
}

/* In-order traversal with an explicit stack; returns a checksum of the key order. */
static uint64_t tree_walk(const struct tnode *t, long n, long *visited, long *height) {
    const struct tnode **stack = xmalloc((size_t)(n + 1) * sizeof *stack);
    long sp = 0, max_sp = 0;
    uint64_t h = FNV_INIT, last = 0;
    *visited = 0;
    while (t || sp) {
        while (t) {
            stack[sp++] = t;
            if (sp > max_sp) max_sp = sp;
            t = t->left;
        }
        t = stack[--sp];
        if (*visited && t->key <= last) {
            printf("tree out of order\n");
            exit(1);
        }
        last = t->key;
        h = mix(h, t->key * t->count);
        ++*visited;
        t = t->right;
    }
    *height = max_sp;
    free(stack);
    return h;
}

static void tree_free(struct tnode *t) {
    while (t) {
        /* Rotate the left subtree up until there is none, then free and go right. */
        if (t->left) {
            struct tnode *l = t->left;
            t->left = l->right;
            l->right = t;
            t = l;
        } else {
            struct tnode *r = t->right;
            free(t);
            t = r;
        }
    }
}

int main(int argc, char **argv) {
    long n = size_arg(argc, argv, 400000);
    rng_seed(3);

    /* 1. A list whose successive nodes are scattered in memory. */
    struct item *items = xmalloc((size_t)n * sizeof *items);
    long *perm = xmalloc((size_t)n * sizeof *perm);
    for (long i = 0; i < n; i++) perm[i] = i;
    for (long i = n - 1; i > 0; i--) {
        long j = (long)rng_below((uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (long i = 0; i < n; i++) {
        items[perm[i]].next = i + 1 < n ? &items[perm[i + 1]] : NULL;
        items[perm[i]].value = (uint64_t)i * 2654435761u;
    }
    uint64_t list_sum = 0;
    for (int pass = 0; pass < 8; pass++) {
        for (struct item *it = &items[perm[0]]; it; it = it->next) {
            list_sum += it->value ^ (uint64_t)pass;
            it->value += list_sum & 7;
        }
    }
    printf("list: %ld nodes x 8 passes, checksum %016llx\n", n, (unsigned long long)list_sum);

    /* 2. A binary search tree of random keys: build, search, traverse. */
    struct tnode *root = NULL;
    uint64_t range = (uint64_t)n * 4;
    for (long i = 0; i < n; i++) root = tree_insert(root, rng_below(range));
    long found = 0;
    uint64_t fsum = 0;
    for (long i = 0; i < 2 * n; i++) {
        const struct tnode *t = tree_find(root, rng_below(range));
        if (t) {
            found++;
            fsum += t->count;
        }
    }
    long visited, height;
    uint64_t th = tree_walk(root, n, &visited, &height);
    printf("tree: %ld keys, height %ld, %ld of %ld searches found (%llu), checksum %016llx\n", visited, height, found, 2 * n,
           (unsigned long long)fsum, (unsigned long long)th);
    tree_free(root);

    /* 3. A network: relax node potentials along arcs until no arc has negative reduced cost
     *    (Bellman-Ford style, as mcf's pricing walks arcs through node pointers). */
    long nn = n / 4 > 2 ? n / 4 : 2, na = nn * 4;
    struct node *nodes = xmalloc((size_t)nn * sizeof *nodes);
    struct arc *arcs = xmalloc((size_t)na * sizeof *arcs);
    memset(nodes, 0, (size_t)nn * sizeof *nodes);
    for (long i = 0; i < nn; i++) nodes[i].potential = i == 0 ? 0 : INT64_MAX / 4;
    for (long a = 0; a < na; a++) {
        long from = a < nn - 1 ? a : (long)rng_below((uint64_t)nn); /* a path keeps every node reachable */
        long to = a < nn - 1 ? a + 1 : (long)rng_below((uint64_t)nn);
        arcs[a].tail = &nodes[from];
        arcs[a].head = &nodes[to];
        arcs[a].cost = 1 + (int64_t)rng_below(1000);
        arcs[a].flow = 0;
        arcs[a].next_out = nodes[from].first_out;
        nodes[from].first_out = &arcs[a];
    }
    long rounds = 0, relaxed = 0;
    for (int changed = 1; changed && rounds < 64; rounds++) {
        changed = 0;
        for (long i = 0; i < nn; i++) {
            struct node *u = &nodes[i];
            if (u->potential == INT64_MAX / 4) continue;
            for (struct arc *a = u->first_out; a; a = a->next_out) {
                int64_t reduced = a->cost + u->potential - a->head->potential;
                if (reduced < 0) {
                    a->head->potential = u->potential + a->cost;
                    a->head->pred = u;
                    a->head->depth = u->depth + 1;
                    a->flow++;
                    relaxed++;
                    changed = 1;
                }
            }
        }
    }
    uint64_t nh = FNV_INIT;
    int64_t maxdepth = 0;
    for (long i = 0; i < nn; i++) {
        nh = mix(nh, (uint64_t)nodes[i].potential);
        if (nodes[i].depth > maxdepth) maxdepth = nodes[i].depth;
    }
    printf("network: %ld nodes, %ld arcs, %ld rounds, %ld relaxations, max depth %lld, checksum %016llx\n", nn, na, rounds,
           relaxed, (long long)maxdepth, (unsigned long long)nh);
    free(items);
    free(perm);
    free(nodes);
    free(arcs);
    return 0;
}

// C++ synchronisation dep must see through the C++ runtime, each beside a racy variant.
//
// Usage: guards MODE
//   static_ok     two threads use a function-local static built on first use          (no race)
//   static        one of them then changes it without a lock                          (race)
//   once_ok       a table built by std::call_once, read by both threads               (no race)
//   shared_ok     two threads drop copies of a shared_ptr; the last one destroys it   (no race)
//   shared        the object is changed through the pointer by both, unlocked         (race)
//
// Each racing access carries a `race:NAME` comment on its line.
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

struct Table {
    long cells[16];
    Table() {
        for (int i = 0; i < 16; i++) cells[i] = i * i;
    }
    ~Table() { std::memset(cells, 0, sizeof cells); }
};

static Table &table() {
    static Table t;  // __cxa_guard_acquire / __cxa_guard_release
    return t;
}

static long sum(const Table &t) {
    long s = 0;
    for (long c : t.cells) s += c;  // race:static-read
    return s;
}

static int run_static(bool change) {
    long a = 0, b = 0;
    std::thread one([&] {
        a = sum(table());
        if (change) table().cells[3] = 0;  // race:static-write
    });
    std::thread two([&] { b = sum(table()); });
    one.join();
    two.join();
    std::printf("%ld %ld\n", a, b);
    return 0;
}

static std::once_flag once;
static Table *built;

static long use_once() {
    std::call_once(once, [] { built = new Table; });
    return sum(*built);
}

static int run_once() {
    long a = 0, b = 0;
    std::thread one([&] { a = use_once(); });
    std::thread two([&] { b = use_once(); });
    one.join();
    two.join();
    std::printf("%ld %ld\n", a, b);
    return 0;
}

static int run_shared(bool change) {
    auto p = std::make_shared<Table>();
    // Both copies are made before either thread starts: nothing but the count orders them.
    std::vector<std::shared_ptr<Table>> copies{p, p};
    p.reset();
    std::vector<std::thread> ts;
    for (int k = 0; k < 2; k++) {
        ts.emplace_back([q = std::move(copies[k]), change, k]() mutable {
            if (change) q->cells[0] = k;  // race:shared
            long s = sum(*q);
            q.reset();  // the last owner runs ~Table
            std::printf("%ld\n", s);
        });
    }
    for (auto &t : ts) t.join();
    return 0;
}

int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "";
    if (!std::strcmp(m, "static_ok")) return run_static(false);
    if (!std::strcmp(m, "static")) return run_static(true);
    if (!std::strcmp(m, "once_ok")) return run_once();
    if (!std::strcmp(m, "shared_ok")) return run_shared(false);
    if (!std::strcmp(m, "shared")) return run_shared(true);
    std::fprintf(stderr, "usage: guards MODE (see guards.cpp)\n");
    return 2;
}

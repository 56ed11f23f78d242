// C++ unwinding: exceptions thrown through several frames holding std::vector/std::string, RAII destructors, std::sort.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

struct Guard {
    std::string name;
    explicit Guard(std::string n) : name(std::move(n)) {}
    ~Guard() { std::printf("exceptions: ~Guard(%s)\n", name.c_str()); }
};

struct ParseError : std::runtime_error {
    int depth;
    ParseError(const std::string &msg, int d) : std::runtime_error(msg), depth(d) {}
};

static int level3(const std::vector<int> &v, int depth)
{
    std::string tag = "level3-" + std::to_string(depth);
    int s = 0;
    for (int x : v) s += x;
    if (s % 3 == depth % 3) throw ParseError(tag + " sum=" + std::to_string(s), depth);
    return s;
}

static int level2(int depth)
{
    Guard g("level2-" + std::to_string(depth));
    std::vector<int> v;
    for (int i = 0; i < 100 + depth; i++) v.push_back(i * depth);
    return level3(v, depth) + 1;
}

static int level1(int depth)
{
    std::vector<std::string> words = {"alpha", "beta", "gamma"};
    if (depth == 4) throw std::out_of_range("level1 depth 4: " + words.at(2));
    return level2(depth) * 2;
}

int main()
{
    int caught = 0, ok_sum = 0;
    for (int d = 1; d <= 6; d++) {
        try {
            Guard outer("main-" + std::to_string(d));
            ok_sum += level1(d);
        } catch (const ParseError &e) {
            caught++;
            std::printf("exceptions: caught ParseError '%s' depth=%d\n", e.what(), e.depth);
        } catch (const std::exception &e) {
            caught++;
            std::printf("exceptions: caught std::exception '%s'\n", e.what());
        }
    }

    try {
        std::vector<int> small(3);
        (void)small.at(10);  // library-thrown exception
    } catch (const std::out_of_range &) {
        caught++;
        std::printf("exceptions: caught vector::at out_of_range\n");
    }

    std::vector<std::string> names;
    for (int i = 0; i < 50; i++) names.push_back("n" + std::to_string((i * 37) % 50));
    std::sort(names.begin(), names.end());
    std::vector<int> nums;
    for (int i = 0; i < 1000; i++) nums.push_back((i * 7919) % 1009);
    std::sort(nums.begin(), nums.end(), [](int a, int b) { return a > b; });
    unsigned long h = 0;
    for (const auto &s : names) for (char c : s) h = h * 131 + (unsigned char)c;
    for (int x : nums) h = h * 31 + (unsigned)x;

    std::printf("exceptions: caught=%d ok_sum=%d first=%s last=%s max=%d checksum=%016lx\n", caught, ok_sum,
                names.front().c_str(), names.back().c_str(), nums.front(), h);
    return 0;
}

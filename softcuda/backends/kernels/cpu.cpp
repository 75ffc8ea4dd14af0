// softcuda's native CPU kernels: elementwise ops, reductions and softmax on a pool of threads.
//
// Compiled at first use by softcuda/backends/native.py with the machine's C++ compiler
// (-O3 -march=native -fopenmp-simd -pthread, never -ffast-math: NaN and inf keep IEEE meaning),
// after the registry's functors and the entry points generated from them (native.source()).
// Every loop is written so that the compiler vectorizes it: the float32 exp, log and tanh (in
// cpu_math.hpp, compiled first)
// are polynomials or rational functions with integer bit tricks, no library calls, because a
// call to libm's expf in a loop stops vectorization and costs ten times more per element.
// float64 calls the C++ library.
//
// Threads: an entry point takes the most threads it may use (the profile's cpu_threads) and cuts
// its work into chunks of at least SC_GRAIN elements (an element of a transcendental op counts as
// several), at most four per thread; a small op is one chunk and runs on the calling thread
// alone.  Each thread of the job owns some chunks, claims those first and then helps with the
// rest (the pool below): the calling thread never waits for a worker that has not started,
// so a kernel whose workers are asleep,
// or whose cores another library's spinning threads hold, still runs at one core's speed or
// better.  Partial sums are kept per chunk and combined in chunk order: a result does not
// depend on which thread ran what.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

// i64, SC_INLINE and the math (sc_exp, sc_log, sc_tanh, ...) come first, from cpu_math.hpp

// elements of one-flop work per chunk, as PyTorch's grain; tests lower it (sc_set_grain) to run
// small arrays in several chunks
static i64 SC_GRAIN = 32768;

extern "C" i64 sc_set_grain(i64 grain) {
    i64 was = SC_GRAIN;
    SC_GRAIN = grain > 0 ? grain : 1;
    return was;
}

// set in a child process after fork(): the pool's threads do not survive a fork, so a forked
// child runs every kernel on its own thread
static int SC_FORKED = 0;

extern "C" void sc_after_fork(void) { SC_FORKED = 1; }

// how many chunks ``items`` items of ``work`` one-flop elements in all are cut into
static inline i64 sc_chunks(i64 work, i64 items, int most) {
    if (SC_FORKED || most <= 1 || items <= 1) return 1;
    i64 want = work / SC_GRAIN;
    i64 cap = 4 * (i64)most;
    if (want > cap) want = cap;
    if (want > items) want = items;
    if (want > 4096) want = 4096;
    return want < 1 ? 1 : want;
}

// [lo, hi) of part i of n cut into parts nearly equal pieces
static inline void sc_part(i64 n, i64 parts, i64 i, i64* lo, i64* hi) {
    i64 base = n / parts, extra = n % parts;
    *lo = i * base + (i < extra ? i : extra);
    *hi = *lo + base + (i < extra ? 1 : 0);
}

static inline void sc_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// ---- the pool: workers that claim chunks ------------------------------------------------------
//
// One 64-bit word announces a job: its epoch (41 bits, one more per job), how many threads it
// may use (10) and its chunks (13).  The job's team is its first min(threads, chunks) threads,
// the caller thread 0.  Thread t of a team of P owns chunks t, t + P, t + 2P, ...: it claims
// those first, then helps with the others' not yet started.  A claim is a compare-and-swap of the
// chunk's flag from below the job's epoch to it, so a chunk runs once, and a worker that read
// an epoch whose job has ended finds every flag at or past it and claims nothing.  Owning
// chunks by number keeps a chunk on one core from call to call: at sizes whose arrays fit the
// cores' caches (2^18 to 2^20 float32) chunks claimed by whoever came first moved between cores
// every call, and an add ran at half PyTorch's speed on the H100's 16-core host, whose OpenMP
// threads keep theirs.  Helping keeps what claiming gave: a kernel whose workers are asleep,
// or whose cores another library's spinning threads hold, still runs at one core's speed.
// The function and context are read after a successful claim and stay valid because the
// caller does not return (nor start another job) until every chunk is done.  Idle workers spin
// for SC_SPIN_US (after the first SC_YIELD_US yielding their core to any thread that wants it:
// a BLAS call right after a kernel waited milliseconds for its threads otherwise), then sleep
// on a condition variable; the caller wakes sleepers only when there are.

typedef void (*sc_task)(void* ctx, i64 chunk);
static const int SC_SPIN_US = 200;
static const int SC_YIELD_US = 20;  // after this long idle, spin by yielding the core
static const i64 SC_MAX_CHUNKS = 4096;  // sc_chunks gives at most 4 per thread, 1023 threads

struct SCSlot {  // one worker's bed: woken only for a job it may take part in
    std::condition_variable cv;
    bool sleeping = false;  // under SCPool::m
};

struct SCPool {
    std::atomic<uint64_t> word{0};
    std::atomic<i64> done{0};
    sc_task fn = nullptr;
    void* ctx = nullptr;
    std::mutex m;
    std::atomic<int> sleepers{0};
    std::mutex busy;
    std::vector<SCSlot*> slots;  // slots[k] is worker k+1's; never freed (see sc_pool)
    std::atomic<uint64_t> flag[SC_MAX_CHUNKS];  // the epoch of the job that last claimed it
    SCPool() {
        for (auto& f : flag) f.store(0, std::memory_order_relaxed);
    }
};

// never destroyed: at exit its workers may still wait on their condition variables, and a
// static destructor would pull them from under them
static SCPool& sc_pool = *new SCPool;

static inline uint64_t sc_epoch(uint64_t w) { return w >> 23; }
static inline int sc_most(uint64_t w) { return (int)((w >> 13) & 0x3ff); }
static inline i64 sc_count(uint64_t w) { return (i64)(w & 0x1fff); }
static inline int sc_team(uint64_t w) {
    i64 c = sc_count(w);
    return c < sc_most(w) ? (int)c : sc_most(w);
}

// run chunk c of the job of ``epoch`` if no thread has claimed it
static inline void sc_take(i64 c, uint64_t epoch) {
    SCPool& p = sc_pool;
    uint64_t v = p.flag[c].load(std::memory_order_relaxed);
    while (v < epoch) {
        if (p.flag[c].compare_exchange_weak(v, epoch, std::memory_order_acq_rel)) {
            p.fn(p.ctx, c);
            p.done.fetch_add(1, std::memory_order_release);
            return;
        }
    }
}

// the chunks of the job of ``epoch`` that thread ``me`` owns, then the others' left unclaimed;
// ``me`` 0 is the caller
static void sc_claim(uint64_t epoch, int me) {
    uint64_t w = sc_pool.word.load(std::memory_order_acquire);
    if (sc_epoch(w) != epoch) return;
    const i64 chunks = sc_count(w);
    const int team = sc_team(w);
    if (me >= team) return;
    for (int k = 0; k < team; ++k) {
        const int owner = (me + k) % team;
        for (i64 c = owner; c < chunks; c += team) sc_take(c, epoch);
    }
}

// A worker takes part in a job only where its number is under the job's team; for another it
// neither claims nor counts the job as work, so it goes on to sleep on time.
static void sc_worker(int me, SCSlot* slot, uint64_t seen) {
    SCPool& p = sc_pool;
    auto start = std::chrono::steady_clock::now();
    int spins = 0;
    for (;;) {
        uint64_t w = p.word.load(std::memory_order_acquire);
        if (sc_epoch(w) != seen) {
            seen = sc_epoch(w);
            if (me < sc_team(w)) {
                sc_claim(seen, me);
                start = std::chrono::steady_clock::now();
            }
            continue;
        }
        sc_relax();
        if (++spins % 64) continue;
        auto idle = std::chrono::steady_clock::now() - start;
        if (idle < std::chrono::microseconds(SC_YIELD_US)) continue;
        if (idle < std::chrono::microseconds(SC_SPIN_US)) {
            std::this_thread::yield();  // a thread that needs this core gets it at once
            continue;
        }
        {
            std::unique_lock<std::mutex> lock(p.m);
            slot->sleeping = true;
            p.sleepers.fetch_add(1);
            slot->cv.wait(lock, [&] {
                uint64_t now = p.word.load();
                return sc_epoch(now) != seen && me < sc_team(now);
            });
            slot->sleeping = false;
            p.sleepers.fetch_sub(1);
        }
        start = std::chrono::steady_clock::now();
    }
}

// run fn(ctx, c) for every chunk c < chunks on at most ``most`` threads, the caller one of them
static void sc_pool_run(sc_task fn, void* ctx, i64 chunks, int most) {
    SCPool& p = sc_pool;
    if (most > 1023) most = 1023;
    // another thread's job in the pool, or more chunks than flags: on its caller alone
    if (chunks > SC_MAX_CHUNKS || !p.busy.try_lock()) {
        for (i64 c = 0; c < chunks; ++c) fn(ctx, c);
        return;
    }
    // a new worker starts from the epoch before this job's, so that it takes part in this job
    // (reading the word itself, it could read this job's epoch and sit it out)
    const uint64_t before = sc_epoch(p.word.load());
    while ((int)p.slots.size() < most - 1) {
        p.slots.push_back(new SCSlot);
        std::thread(sc_worker, (int)p.slots.size(), p.slots.back(), before).detach();
    }
    p.fn = fn;
    p.ctx = ctx;
    p.done.store(0, std::memory_order_relaxed);
    // 41 bits of epochs: at a job a microsecond they last 25 days; at the wrap every flag
    // starts again from 0 (no job runs now, and a worker still holding an epoch from 2^41 jobs
    // ago is not a case this pool guards against)
    uint64_t epoch = (sc_epoch(p.word.load()) + 1) & ((1ULL << 41) - 1);
    if (epoch == 0) {
        for (auto& f : p.flag) f.store(0, std::memory_order_relaxed);
        epoch = 1;
    }
    uint64_t w = (epoch << 23) | ((uint64_t)most << 13) | (uint64_t)chunks;
    const int team = sc_team(w);
    {
        std::lock_guard<std::mutex> lock(p.m);  // a worker going to sleep sees it or is woken
        p.word.store(w, std::memory_order_release);
        // only the team's sleepers are woken: each wake is a system call, and a small job
        // between a plan's GPU steps (its workers asleep) paid for waking all fifteen of a
        // 16-core host's
        if (p.sleepers.load() > 0) {
            for (int k = 0; k + 1 < team; ++k)
                if (p.slots[k]->sleeping) p.slots[k]->cv.notify_one();
        }
    }
    sc_claim(epoch, 0);
    while (p.done.load(std::memory_order_acquire) < chunks) sc_relax();
    p.busy.unlock();
}


// The pool for code compiled apart (the fused kernels, native_fused.py): one pool per process,
// whichever library runs a job, so their threads never compete.
extern "C" void sc_parallel(sc_task fn, void* ctx, i64 chunks, int most) {
    if (chunks <= 1 || most <= 1 || SC_FORKED) {
        for (i64 c = 0; c < chunks; ++c) fn(ctx, c);
        return;
    }
    sc_pool_run(fn, ctx, chunks, most);
}

// Wake the pool and wait until ``most`` threads (the caller one of them) have taken part in
// one job, or ``wait_us`` have passed; returns how many had.  Afterwards the workers spin for
// SC_SPIN_US, as they do between a plan's steps.  The sweep calls it before each timed call of
// a cpu_threads plan: a worker woken by the untimed call before it often had not started yet,
// so the timed call ran on fewer threads than a plan running its steps back to back has
// (extra/pool_states.py: an add of 2^18 on the H100's host, 11 us with the threads spinning,
// 66 us asleep, and priced at 27 us by a quick sweep).
struct SCReady {
    std::atomic<int> arrived{0};  // distinct threads that ran a chunk before the deadline
    int team;
    uint64_t call;  // this call's number (sc_ready_calls)
    std::chrono::steady_clock::time_point deadline;
};

static std::atomic<uint64_t> sc_ready_calls{0};
static thread_local uint64_t sc_ready_seen = 0;  // the last call this thread counted itself in

extern "C" int sc_pool_ready(int most, int wait_us) {
    if (most > 1023) most = 1023;  // the pool's own cap (sc_pool_run)
    if (most <= 1 || SC_FORKED) return 1;
    SCReady r;
    r.team = most;
    r.call = ++sc_ready_calls;
    r.deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(wait_us);
    sc_parallel(
        [](void* ctx, i64) {
            SCReady& q = *static_cast<SCReady*>(ctx);
            // a thread counts once, and only before the deadline: a chunk it runs for a late
            // worker is help, not another thread
            if (sc_ready_seen == q.call || std::chrono::steady_clock::now() >= q.deadline) return;
            sc_ready_seen = q.call;
            q.arrived.fetch_add(1);
            while (q.arrived.load() < q.team && std::chrono::steady_clock::now() < q.deadline)
                sc_relax();
        },
        &r, most, most);
    const int arrived = r.arrived.load();
    return arrived > 0 ? arrived : 1;  // the caller took part, in time or not
}

// body(c) for every chunk c < chunks, through sc_parallel (on the caller alone where one chunk)
template <class F>
static void sc_for(i64 chunks, int most, F&& body) {
    typedef typename std::remove_reference<F>::type Body;
    sc_parallel([](void* ctx, i64 c) { (*static_cast<Body*>(ctx))(c); }, &body, chunks, most);
}

// how many chunks a job of ``work`` one-flop elements over ``items`` items is cut into
extern "C" i64 sc_chunk_count(i64 work, i64 items, int most) { return sc_chunks(work, items, most); }

// ---- elementwise loops (the entry points below instantiate them per functor) ----------------

// out[i] = F(a[i]) over a contiguous range; the one loop every unary entry runs
template <class F, class T>
static void sc_unary_run(const T* __restrict a, T* __restrict out, i64 n, T s) {
#pragma omp simd
    for (i64 i = 0; i < n; ++i) out[i] = F::f(a[i], s);
}

template <class F, class T>
static void sc_unary(const T* a, T* out, i64 n, T s, int most, int weight) {
    i64 chunks = sc_chunks(n * weight, n, most);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(n, chunks, c, &lo, &hi);
        sc_unary_run<F, T>(a + lo, out + lo, hi - lo, s);
    });
}

// mode 0: a and b both arrays; 1: b the scalar s; 2: a the scalar s
template <class F, class T>
static void sc_binary_run(const T* __restrict a, const T* __restrict b, T* __restrict out, i64 n,
                          T s, int mode) {
    if (mode == 0) {
        for (i64 i = 0; i < n; ++i) out[i] = F::f(a[i], b[i]);
    } else if (mode == 1) {
        for (i64 i = 0; i < n; ++i) out[i] = F::f(a[i], s);
    } else {
        for (i64 i = 0; i < n; ++i) out[i] = F::f(s, b[i]);
    }
}

template <class F, class T>
static void sc_binary(const T* a, const T* b, T* out, i64 n, T s, int mode, int most) {
    i64 chunks = sc_chunks(n, n, most);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(n, chunks, c, &lo, &hi);
        sc_binary_run<F, T>(mode == 2 ? a : a + lo, mode == 1 ? b : b + lo, out + lo, hi - lo, s,
                            mode);
    });
}

// Broadcast or strided operands: out is contiguous with ``ndim`` dims (at most 8) and the
// operands' strides are in elements (0 where they broadcast).  Rows of the last dim are spread
// over threads; a row whose operands are contiguous or broadcast runs a vectorized loop.
template <class F, class T>
static void sc_binary_rows(const T* a, const T* b, T* out, int ndim, const i64* shape,
                           const i64* sa, const i64* sb, int most) {
    i64 inner = shape[ndim - 1], rows = 1;
    for (int d = 0; d < ndim - 1; ++d) rows *= shape[d];
    i64 ia = sa[ndim - 1], ib = sb[ndim - 1];
    i64 chunks = sc_chunks(rows * inner, rows, most);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(rows, chunks, c, &lo, &hi);
        for (i64 row = lo; row < hi; ++row) {
            i64 oa = 0, ob = 0, rest = row;
            for (int d = ndim - 2; d >= 0; --d) {
                i64 j = rest % shape[d];
                rest /= shape[d];
                oa += j * sa[d];
                ob += j * sb[d];
            }
            const T* pa = a + oa;
            const T* pb = b + ob;
            T* po = out + row * inner;
            if (ia == 1 && ib == 1) sc_binary_run<F, T>(pa, pb, po, inner, T(0), 0);
            else if (ia == 1 && ib == 0) sc_binary_run<F, T>(pa, pb, po, inner, *pb, 1);
            else if (ia == 0 && ib == 1) sc_binary_run<F, T>(pa, pb, po, inner, *pa, 2);
            else
                for (i64 i = 0; i < inner; ++i) po[i] = F::f(pa[i * ia], pb[i * ib]);
        }
    });
}

// ---- reductions: the input contiguous, seen as (outer, len, inner), reduced along len --------

// the sum of a contiguous run, in double
template <class T>
static double sc_run_sum(const T* __restrict x, i64 n) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (i64 i = 0; i < n; ++i) s += (double)x[i];
    return s;
}

// float32: blocks of SC_SUM_BLOCK added in float across the vector's lanes (each lane adds at
// most SC_SUM_BLOCK / 16 terms: numpy's pairwise accuracy, a little above or below it by the
// draw), the blocks' sums in double: 1.45 times the speed of converting every element while the
// data sits in cache (measured on this AVX-512 host; equal where memory bounds it), and a sum of
// 2^24 ones stays exact.  A block whose float sum overflows is added again in double.
static const i64 SC_SUM_BLOCK = 256;

template <>
double sc_run_sum<float>(const float* __restrict x, i64 n) {
    double s = 0.0;
    for (i64 b = 0; b < n; b += SC_SUM_BLOCK) {
        i64 e = std::min(n, b + SC_SUM_BLOCK);
        float f = 0.0f;
#pragma omp simd reduction(+ : f)
        for (i64 i = b; i < e; ++i) f += x[i];
        // a block of huge values can overflow in float where its double sum does not: redo it
        if (!std::isfinite(f)) {
            double d = 0.0;
            for (i64 i = b; i < e; ++i) d += (double)x[i];
            s += d;
        } else {
            s += (double)f;
        }
    }
    return s;
}

// the largest of a contiguous run (n >= 1), NaN if any is NaN, as numpy's max
template <class T>
static T sc_run_max(const T* __restrict x, i64 n) {
    T m = x[0];
    int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
    for (i64 i = 0; i < n; ++i) {
        m = x[i] > m ? x[i] : m;
        nan |= x[i] != x[i];
    }
    return nan ? T(NAN) : m;
}

template <class T>
static T sc_run_reduce(const T* x, i64 n, int op) {  // op 0 sum, 1 mean, 2 max
    if (op == 2) return sc_run_max(x, n);
    double s = sc_run_sum(x, n);
    return (T)(op == 1 ? s / (double)n : s);
}

// all of a long run in chunks: partials in double (sum) or T (max), combined in chunk order
template <class T>
static T sc_reduce_long(const T* x, i64 n, int op, int most) {
    i64 chunks = sc_chunks(n, n, most);
    std::vector<double> part(chunks);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(n, chunks, c, &lo, &hi);
        part[c] = op == 2 ? (double)sc_run_max(x + lo, hi - lo) : sc_run_sum(x + lo, hi - lo);
    });
    double r = part[0];
    for (i64 i = 1; i < chunks; ++i) {
        if (op != 2) r += part[i];
        else if (r == r && (part[i] > r || part[i] != part[i])) r = part[i];
    }
    return (T)(op == 1 ? r / (double)n : r);
}

static const i64 SC_TILE = 256;  // outputs one thread keeps partials for, along inner

template <class T>
static void sc_reduce_tile(const T* x, T* out, i64 len, i64 inner, i64 j0, i64 j1, int op) {
    double acc[SC_TILE];
    int nan[SC_TILE];
    i64 w = j1 - j0;
    for (i64 j = 0; j < w; ++j) {
        acc[j] = op == 2 ? (double)x[j0 + j] : 0.0;
        nan[j] = 0;
    }
    for (i64 k = 0; k < len; ++k) {
        const T* row = x + k * inner + j0;
        if (op == 2) {
            for (i64 j = 0; j < w; ++j) {
                double v = (double)row[j];
                acc[j] = v > acc[j] ? v : acc[j];
                nan[j] |= v != v;
            }
        } else {
            for (i64 j = 0; j < w; ++j) acc[j] += (double)row[j];
        }
    }
    for (i64 j = 0; j < w; ++j) {
        double v = op == 1 ? acc[j] / (double)len : acc[j];
        out[j0 + j] = (T)(op == 2 && nan[j] ? NAN : v);
    }
}

// The input seen as (outer, len, inner), worked along len: with inner 1, whole rows spread over
// the chunks (row(o) for each); otherwise tiles of up to SC_TILE columns of inner (tile(o, j0,
// j1)).  Reductions and softmax both cut their work this way.
template <class Row, class Tile>
static void sc_along(i64 outer, i64 inner, i64 work, int most, Row&& row, Tile&& tile) {
    if (inner == 1) {
        i64 chunks = sc_chunks(work, outer, most);
        sc_for(chunks, most, [&](i64 c) {
            i64 lo, hi;
            sc_part(outer, chunks, c, &lo, &hi);
            for (i64 o = lo; o < hi; ++o) row(o);
        });
        return;
    }
    i64 tiles = (inner + SC_TILE - 1) / SC_TILE;
    i64 chunks = sc_chunks(work, outer * tiles, most);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(outer * tiles, chunks, c, &lo, &hi);
        for (i64 t = lo; t < hi; ++t) {
            i64 j0 = (t % tiles) * SC_TILE;
            tile(t / tiles, j0, std::min(inner, j0 + SC_TILE));
        }
    });
}

template <class T>
static void sc_reduce(const T* x, T* out, i64 outer, i64 len, i64 inner, int op, int most) {
    if (len == 0) {  // numpy's values over nothing (max over nothing is refused at graph build)
        for (i64 i = 0; i < outer * inner; ++i) out[i] = op == 1 ? T(NAN) : T(0);
        return;
    }
    i64 work = outer * len * inner;
    if (inner == 1 && outer == 1) {
        out[0] = sc_reduce_long(x, len, op, most);
        return;
    }
    sc_along(
        outer, inner, work, most, [&](i64 o) { out[o] = sc_run_reduce(x + o * len, len, op); },
        [&](i64 o, i64 j0, i64 j1) {
            sc_reduce_tile(x + o * len * inner, out + o * inner, len, inner, j0, j1, op);
        });
}

// ---- softmax and log_softmax along len, same view -----------------------------------------------------------

// out = exp(x - m) over a contiguous run; returns the sum of out, in double
template <class T>
static double sc_exp_shifted(const T* __restrict x, T* __restrict out, i64 n, T m) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (i64 i = 0; i < n; ++i) {
        T e = sc_exp(x[i] - m);
        out[i] = e;
        s += (double)e;
    }
    return s;
}

// float32: as sc_run_sum<float>, blocks of SC_SUM_BLOCK terms in float (every term is at most 1:
// no block overflows) and the blocks in double, so the exp loop keeps its full vector width
template <>
double sc_exp_shifted<float>(const float* __restrict x, float* __restrict out, i64 n, float m) {
    double s = 0.0;
    for (i64 b = 0; b < n; b += SC_SUM_BLOCK) {
        const i64 e = std::min(n, b + SC_SUM_BLOCK);
        float f = 0.0f;
#pragma omp simd reduction(+ : f)
        for (i64 i = b; i < e; ++i) {
            const float v = sc_exp(x[i] - m);
            out[i] = v;
            f += v;
        }
        s += (double)f;
    }
    return s;
}

template <class T>
static void sc_scale(T* __restrict out, i64 n, T by) {
    for (i64 i = 0; i < n; ++i) out[i] = out[i] * by;
}

// out = x - m - log(s): log_softmax's last pass, where softmax scales by 1/s
template <class T>
static void sc_log_shifted(const T* __restrict x, T* __restrict out, i64 n, T m, T ls) {
    for (i64 i = 0; i < n; ++i) out[i] = (x[i] - m) - ls;
}

// LOG: log_softmax, x - max - log(sum(exp(x - max))): the same passes, the last one subtracts
template <class T, bool LOG>
static void sc_softmax_row(const T* __restrict x, T* __restrict out, i64 n) {
    T m = sc_run_max(x, n);
    double s = sc_exp_shifted(x, out, n, m);
    if (LOG)
        sc_log_shifted(x, out, n, m, (T)std::log(s));
    else
        sc_scale(out, n, (T)(1.0 / s));
}

// Short rows (fewer than SC_SHORT_ROW elements: a classifier's logits) a block of rows at a
// time, turned on its side: element k of the block's row r goes to col[k * b + r], so that every
// per-row step (the maximum, exp, the sum, the scale) is one vectorized loop over the block's
// rows instead of a loop of 10 per row, whose sums in double wait on each other.  One row at a
// time a 1024 x 10 log_softmax took 96 us (PyTorch's 79); with exp alone vectorized over the block
// rows of 10 still took 3 to 4 ns an element on one thread against 0.4 for rows of 1,000.  Each
// element sees the same arithmetic in the same order as in that block code in row order (x - max,
// exp, a sum in double from a row's first element to its last), so its results are unchanged to
// the bit (sc_softmax_row, for longer rows, sums in another order: rounding-level apart).
static const i64 SC_SHORT_ROW = 64;
static const i64 SC_SHORT_BLOCK = 256;   // rows per block at most
static const i64 SC_SHORT_ELEMS = 4096;  // elements per block: 16 KB of float32, in L1

template <class T, bool LOG>
static void sc_softmax_short(const T* x, T* out, i64 rows, i64 len) {
    T col[SC_SHORT_ELEMS];
    T peak[SC_SHORT_BLOCK];
    int nan[SC_SHORT_BLOCK];
    double sum[SC_SHORT_BLOCK];
    T scale[SC_SHORT_BLOCK];
    const i64 per = SC_SHORT_ELEMS / len < SC_SHORT_BLOCK ? SC_SHORT_ELEMS / len : SC_SHORT_BLOCK;
    for (i64 r0 = 0; r0 < rows; r0 += per) {
        const i64 b = rows - r0 < per ? rows - r0 : per;
        const T* xb = x + r0 * len;
        T* ob = out + r0 * len;
        for (i64 r = 0; r < b; ++r)
            for (i64 k = 0; k < len; ++k) col[k * b + r] = xb[r * len + k];
#pragma omp simd
        for (i64 r = 0; r < b; ++r) {
            peak[r] = col[r];
            nan[r] = col[r] != col[r];
        }
        for (i64 k = 1; k < len; ++k) {
            const T* c = col + k * b;
#pragma omp simd
            for (i64 r = 0; r < b; ++r) {
                peak[r] = c[r] > peak[r] ? c[r] : peak[r];
                nan[r] |= c[r] != c[r];
            }
        }
#pragma omp simd
        for (i64 r = 0; r < b; ++r) {
            peak[r] = nan[r] ? T(NAN) : peak[r];  // as sc_run_max: a NaN anywhere makes the row NaN
            sum[r] = 0.0;
        }
        for (i64 k = 0; k < len; ++k) {
            T* c = col + k * b;
#pragma omp simd
            for (i64 r = 0; r < b; ++r) {
                c[r] = sc_exp(c[r] - peak[r]);
                sum[r] += (double)c[r];
            }
        }
        if (LOG) {
            // sum >= 1 (the maximum's own term): T's log of it, vectorized over the rows
#pragma omp simd
            for (i64 r = 0; r < b; ++r) scale[r] = sc_log((T)sum[r]);
            for (i64 r = 0; r < b; ++r)
                for (i64 k = 0; k < len; ++k)
                    ob[r * len + k] = (xb[r * len + k] - peak[r]) - scale[r];
        } else {
#pragma omp simd
            for (i64 r = 0; r < b; ++r) scale[r] = (T)(1.0 / sum[r]);
            for (i64 r = 0; r < b; ++r)
                for (i64 k = 0; k < len; ++k) ob[r * len + k] = col[k * b + r] * scale[r];
        }
    }
}

template <class T, bool LOG>
static void sc_softmax_tile(const T* x, T* out, i64 len, i64 inner, i64 j0, i64 j1) {
    T peak[SC_TILE];
    double sum[SC_TILE];
    i64 w = j1 - j0;
    for (i64 j = 0; j < w; ++j) { peak[j] = x[j0 + j]; sum[j] = 0.0; }
    for (i64 k = 0; k < len; ++k)
        for (i64 j = 0; j < w; ++j) {
            T v = x[k * inner + j0 + j];
            peak[j] = (v > peak[j] || v != v) ? v : peak[j];
        }
    for (i64 k = 0; k < len; ++k)
        for (i64 j = 0; j < w; ++j) {
            T e = sc_exp(x[k * inner + j0 + j] - peak[j]);
            out[k * inner + j0 + j] = e;
            sum[j] += (double)e;
        }
    if (LOG) {
        T ls[SC_TILE];
        for (i64 j = 0; j < w; ++j) ls[j] = (T)std::log(sum[j]);
        for (i64 k = 0; k < len; ++k)
            for (i64 j = 0; j < w; ++j)
                out[k * inner + j0 + j] = (x[k * inner + j0 + j] - peak[j]) - ls[j];
        return;
    }
    for (i64 k = 0; k < len; ++k)
        for (i64 j = 0; j < w; ++j) out[k * inner + j0 + j] = (T)(out[k * inner + j0 + j] / sum[j]);
}

// one long softmax (axis None, or one row): max, exp and sum, scale, each pass in chunks
template <class T, bool LOG>
static void sc_softmax_long(const T* x, T* out, i64 n, int most) {
    T m = sc_reduce_long(x, n, 2, most);
    i64 chunks = sc_chunks(n * 8, n, most);
    std::vector<double> part(chunks);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(n, chunks, c, &lo, &hi);
        part[c] = sc_exp_shifted(x + lo, out + lo, hi - lo, m);
    });
    double total = 0.0;
    for (i64 i = 0; i < chunks; ++i) total += part[i];
    T inv = (T)(1.0 / total), ls = (T)std::log(total);
    sc_for(chunks, most, [&](i64 c) {
        i64 lo, hi;
        sc_part(n, chunks, c, &lo, &hi);
        if (LOG)
            sc_log_shifted(x + lo, out + lo, hi - lo, m, ls);
        else
            sc_scale(out + lo, hi - lo, inv);
    });
}

template <class T, bool LOG>
static void sc_softmax(const T* x, T* out, i64 outer, i64 len, i64 inner, int most) {
    i64 work = outer * len * inner * 8;
    if (work == 0) return;
    if (inner == 1 && outer == 1) {
        sc_softmax_long<T, LOG>(x, out, len, most);
        return;
    }
    if (inner == 1 && len < SC_SHORT_ROW) {
        i64 chunks = sc_chunks(work, outer, most);
        sc_for(chunks, most, [&](i64 c) {
            i64 lo, hi;
            sc_part(outer, chunks, c, &lo, &hi);
            sc_softmax_short<T, LOG>(x + lo * len, out + lo * len, hi - lo, len);
        });
        return;
    }
    sc_along(
        outer, inner, work, most,
        [&](i64 o) { sc_softmax_row<T, LOG>(x + o * len, out + o * len, len); },
        [&](i64 o, i64 j0, i64 j1) {
            sc_softmax_tile<T, LOG>(x + o * len * inner, out + o * len * inner, len, inner, j0,
                                    j1);
        });
}

// ---- the registry's functors and the entry points follow (generated by native.source()) -----

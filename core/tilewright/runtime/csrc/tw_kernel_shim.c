/* What a CPU kernel library built by TVM needs from a runtime, without TVM.
 *
 * tilewright.runtime.cpu loads this library (RTLD_GLOBAL) before a kernel of a `cpu-so` bundle
 * and points the kernel's context pointers (__TVMBackendParallelLaunch, ...) at the functions
 * below. It provides:
 * - TVMFFIErrorSetRaisedFromCStrParts: a kernel's argument checks report through it; the
 *   message is kept per thread and read back with tw_shim_last_error();
 * - a parallel launcher: a pool of worker threads, created on first use, running the tasks of
 *   one launch at a time (a launch from inside a task runs its tasks serially). Thread i runs
 *   task i when it is free to, else tasks go to whichever thread is awake, the launching one
 *   included, so a launch never waits for a worker that the OS has not scheduled yet. Idle
 *   threads spin for a while (TILEWRIGHT_SPIN_US) before they sleep. The CPU backend's JIT
 *   kernels launch here too;
 * - workspace allocation: aligned malloc and free.
 * Kernels that need anything else (a barrier between parallel tasks, say) are refused by the
 * loader before they are loaded.
 * Built with the host C compiler when a kernel package is built (or on first use). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define TW_MESSAGE 4096
#define TW_MAX_THREADS 256

static __thread char tw_message[TW_MESSAGE];

void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t num_parts) {
  size_t used = 0;
  tw_message[0] = '\0';
  if (kind != NULL) used = (size_t)snprintf(tw_message, TW_MESSAGE, "%s: ", kind);
  for (int32_t i = 0; i < num_parts && used < TW_MESSAGE - 1; ++i) {
    if (parts[i] == NULL) continue;
    used += (size_t)snprintf(tw_message + used, TW_MESSAGE - used, "%s", parts[i]);
  }
}

/* The message of the last error a kernel raised on this thread ("" if none); cleared. */
const char* tw_shim_last_error(void) {
  static __thread char copy[TW_MESSAGE];
  memcpy(copy, tw_message, TW_MESSAGE);
  tw_message[0] = '\0';
  return copy;
}

void* tw_shim_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code,
                              int bits) {
  (void)device_type, (void)device_id, (void)code, (void)bits;
  void* ptr = NULL;
  if (posix_memalign(&ptr, 64, nbytes ? (size_t)nbytes : 1) != 0) {
    TVMFFIErrorSetRaisedFromCStrParts("MemoryError", (const char*[]){"workspace allocation "
                                      "failed"}, 1);
    return NULL;
  }
  return ptr;
}

int tw_shim_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type, (void)device_id;
  free(ptr);
  return 0;
}

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TWParallelEnv;
typedef int (*TWLambda)(int task_id, TWParallelEnv* env, void* cdata);

/* TVM FFI's error functions, when a TVM FFI runtime is loaded globally: a kernel then raises
 * its errors there (per thread), and an error raised in a worker is moved to the launching
 * thread. Without one, errors go through TVMFFIErrorSetRaisedFromCStrParts above. */
static struct {
  void (*move)(void** result);
  void (*set)(void* error);
  int (*decref)(void* object);
} ffi;

static void find_ffi(void) {
  ffi.move = (void (*)(void**))dlsym(RTLD_DEFAULT, "TVMFFIErrorMoveFromRaised");
  ffi.set = (void (*)(void*))dlsym(RTLD_DEFAULT, "TVMFFIErrorSetRaised");
  ffi.decref = (int (*)(void*))dlsym(RTLD_DEFAULT, "TVMFFIObjectDecRef");
  if (!ffi.move || !ffi.set || !ffi.decref) ffi.move = NULL;
}

static struct {
  pthread_mutex_t lock;
  pthread_cond_t start, done;
  pthread_mutex_t launch; /* one launch at a time */
  int threads;            /* workers + the launching thread */
  uint64_t generation;    /* written under the lock, read without it while spinning */
  TWLambda fn;
  void* cdata;
  TWParallelEnv env;
  int claimed[TW_MAX_THREADS]; /* which of the launch's first tasks are taken */
  int scan;                    /* tasks before it are taken */
  int pending, failed, sleepers;
  long spin_ns;
  char message[TW_MESSAGE];
  void* error; /* the TVM FFI error of the first failed task, if TVM FFI is loaded */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .start = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER, .launch = PTHREAD_MUTEX_INITIALIZER};
static __thread int tw_in_task;

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int launched(uint64_t seen) {
  return __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE) != seen;
}

static int finished(uint64_t unused) {
  (void)unused;
  return __atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE) == 0;
}

/* Spin without the lock until `ready(arg)` or for pool.spin_ns; whether it became ready. A
 * thread that finished its part keeps its core warm for what comes next, as OpenMP runtimes
 * do, instead of paying a futex wake-up of tens of microseconds at every launch. */
static int spin_until(int (*ready)(uint64_t), uint64_t arg) {
  long deadline = 0;
  for (unsigned i = 0;; ++i) {
    if (ready(arg)) return 1;
    if ((i & 63) == 0) {
      long t = now_ns();
      if (deadline == 0) deadline = t + pool.spin_ns;
      if (t >= deadline) return 0;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* The task that thread `self` (0: the launching one) runs next: its own first (thread i runs
 * task i of a launch with a task per thread, so a kernel's contiguous share of the blocks is
 * on the same core, in the same caches, from call to call), else the first not taken; -1 when
 * none is left. The pool lock is held. */
static int claim_task(int self) {
  int n = pool.env.num_task, task = -1;
  if (self < n && !pool.claimed[self]) {
    task = self;
  } else {
    while (pool.scan < n && pool.scan < TW_MAX_THREADS && pool.claimed[pool.scan]) pool.scan++;
    if (pool.scan < n) task = pool.scan++;
  }
  if (task >= 0 && task < TW_MAX_THREADS) pool.claimed[task] = 1;
  return task;
}

/* Run tasks of the current launch until none is left; the pool lock is held on entry and
 * on return. */
static void run_tasks(int self) {
  for (int task; (task = claim_task(self)) >= 0;) {
    pthread_mutex_unlock(&pool.lock);
    tw_in_task = 1;
    int rc = pool.fn(task, &pool.env, pool.cdata);
    tw_in_task = 0;
    void* error = NULL;
    if (rc != 0 && ffi.move) ffi.move(&error); /* taken from this thread's TLS */
    pthread_mutex_lock(&pool.lock);
    if (rc != 0 && !pool.failed) {
      pool.failed = 1;
      memcpy(pool.message, tw_message, TW_MESSAGE);
      pool.error = error;
      error = NULL;
    }
    if (error) ffi.decref(error); /* a later task's failure: the first one is reported */
    if (__atomic_sub_fetch(&pool.pending, 1, __ATOMIC_RELEASE) == 0)
      pthread_cond_broadcast(&pool.done);
  }
}

static void* worker(void* arg) {
  int self = (int)(intptr_t)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    if (pool.generation == seen) {
      pthread_mutex_unlock(&pool.lock);
      spin_until(launched, seen);
      pthread_mutex_lock(&pool.lock);
    }
    pool.sleepers++;
    while (pool.generation == seen) pthread_cond_wait(&pool.start, &pool.lock);
    pool.sleepers--;
    seen = pool.generation;
    run_tasks(self);
  }
  return NULL;
}

/* TILEWRIGHT_NUM_THREADS, else TVM_NUM_THREADS (the JIT's kernels run on this pool too, and
 * TVM's variable is how their worker count was always set), else the cores we may run on. */
static int thread_count(void) {
  const char* env = getenv("TILEWRIGHT_NUM_THREADS");
  if (env == NULL || *env == '\0') env = getenv("TVM_NUM_THREADS");
  long n = env ? strtol(env, NULL, 10) : 0;
  if (n <= 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  }
  return n < 1 ? 1 : n > TW_MAX_THREADS ? TW_MAX_THREADS : (int)n;
}

/* How long an idle worker spins before it sleeps: TILEWRIGHT_SPIN_US microseconds (0: sleep
 * at once, as OMP_WAIT_POLICY=passive), else OMP_WAIT_POLICY=passive's 0, else 200 us. */
static long spin_time(void) {
  const char* env = getenv("TILEWRIGHT_SPIN_US");
  if (env != NULL && *env != '\0') {
    long us = strtol(env, NULL, 10);
    return us < 0 ? 0 : us * 1000L;
  }
  const char* policy = getenv("OMP_WAIT_POLICY");
  if (policy != NULL && strcasecmp(policy, "passive") == 0) return 0;
  return 200000L;
}

static void start_pool(void) {
  find_ffi();
  pool.threads = thread_count();
  pool.spin_ns = spin_time();
  for (int i = 1; i < pool.threads; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void*)(intptr_t)i) != 0) {
      pool.threads = i;
      break;
    }
    pthread_detach(t);
  }
}

int tw_shim_parallel_launch(TWLambda fn, void* cdata, int num_task) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (tw_in_task) { /* nested: run serially on this thread */
    TWParallelEnv env = {NULL, num_task > 0 ? num_task : 1};
    for (int i = 0; i < env.num_task; ++i)
      if (fn(i, &env, cdata) != 0) return -1;
    return 0;
  }
  pthread_once(&once, start_pool);
  pthread_mutex_lock(&pool.launch);
  pthread_mutex_lock(&pool.lock);
  pool.fn = fn, pool.cdata = cdata;
  pool.env.num_task = num_task > 0 ? num_task : pool.threads;
  memset(pool.claimed, 0, sizeof pool.claimed);
  pool.scan = 0, pool.pending = pool.env.num_task, pool.failed = 0;
  __atomic_store_n(&pool.generation, pool.generation + 1, __ATOMIC_RELEASE);
  if (pool.sleepers) pthread_cond_broadcast(&pool.start);
  run_tasks(0);
  if (pool.pending > 0) {
    pthread_mutex_unlock(&pool.lock);
    spin_until(finished, 0);
    pthread_mutex_lock(&pool.lock);
  }
  while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
  int failed = pool.failed;
  if (failed) memcpy(tw_message, pool.message, TW_MESSAGE);
  if (pool.error) { /* raised again on the launching thread, which returns the failure */
    ffi.set(pool.error);
    ffi.decref(pool.error);
    pool.error = NULL;
  }
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.launch);
  return failed ? -1 : 0;
}

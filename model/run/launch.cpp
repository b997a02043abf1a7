#include "model/run/launch.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "engine/error.h"
#include "engine/hmac.h"
#include "engine/switches.h"

extern char** environ;

namespace strata {

namespace {

// An integer environment variable within [lo, hi], or nullopt when unset.
std::optional<long> env_int(const EnvLookup& get, const char* name, long lo, long hi, const std::string& expected) {
  const char* v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    STRATA_THROW(ConfigError, fmt::format("environment variable {}='{}': expected {}", name, v, expected),
                 "environment", name);
  return x;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

long require(const std::optional<long>& v, const char* name, const std::string& why) {
  if (!v)
    STRATA_THROW(ConfigError, fmt::format("environment variable {} is not set: {}", name, why), "environment", name);
  return *v;
}

}  // namespace

namespace {
// STRATA_RENDEZVOUS_PORT: the port rank 0 listens on, whatever the launcher says.
void rendezvous_port_override(const EnvLookup& get, LaunchEnv& e) {
  if (!get("STRATA_RENDEZVOUS_PORT") || e.world <= 1) return;
  e.master_port = int(*env_int(get, "STRATA_RENDEZVOUS_PORT", 1, 65535, "a TCP port 1-65535 where rank 0 listens"));
  e.port_name = "STRATA_RENDEZVOUS_PORT";
}
}  // namespace

namespace {
// STRATA_JOB_SECRET: what a peer must prove to join (engine/rendezvous.h). Required for several ranks:
// without it anyone who reaches MASTER_PORT could join or stop the job.
void job_secret(const EnvLookup& get, LaunchEnv& e) {
  if (e.world <= 1) return;
  const char* v = get("STRATA_JOB_SECRET");
  const std::string how =
      "every rank of a job needs the same secret, so that only they can join its rendezvous: export "
      "STRATA_JOB_SECRET=$(openssl rand -hex 32) before torchrun or srun, the same value on every node "
      "(strata-train --gpus N makes one itself)";
  if (!v)
    STRATA_THROW(
        ConfigError,
        fmt::format("environment variable STRATA_JOB_SECRET is not set for a job of {} ranks: {}", e.world, how),
        "environment", "STRATA_JOB_SECRET");
  const size_t n = std::strlen(v);
  if (n < 16 || n > 1024)
    STRATA_THROW(
        ConfigError,
        fmt::format("environment variable STRATA_JOB_SECRET has {} characters: expected 16 to 1024 ({})", n, how),
        "environment", "STRATA_JOB_SECRET");
  e.secret = v;
}
}  // namespace

LaunchEnv read_launch_env(const EnvLookup& lookup) {
  const EnvLookup get = lookup ? lookup : EnvLookup(process_env);
  LaunchEnv e;
  if (const char* t = get("STRATA_COMM_TIMEOUT")) {
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    if (!*t || *end || !(s > 0) || s > kMaxCommTimeoutS)
      STRATA_THROW(ConfigError,
                   fmt::format("environment variable STRATA_COMM_TIMEOUT='{}': expected seconds > 0 and <= {} (7 days)",
                               t, kMaxCommTimeoutS),
                   "environment", "STRATA_COMM_TIMEOUT");
    e.timeout_s = s;
  }
  constexpr long kMax = 1 << 20;
  auto port = [&] { return env_int(get, "MASTER_PORT", 1, 65535, "a TCP port 1-65535 where rank 0 listens"); };
  if (get("RANK") || get("WORLD_SIZE")) {
    e.launcher = "torchrun";
    const char* how =
        "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; set them all "
        "when launching by hand";
    e.world =
        int(require(env_int(get, "WORLD_SIZE", 1, kMax, "the number of ranks, an integer >= 1"), "WORLD_SIZE", how));
    e.rank = int(require(env_int(get, "RANK", 0, e.world - 1, fmt::format("0 <= RANK < WORLD_SIZE ({})", e.world)),
                         "RANK", how));
    e.local_world =
        int(env_int(get, "LOCAL_WORLD_SIZE", 1, e.world,
                    fmt::format("the ranks on this node, 1 <= LOCAL_WORLD_SIZE <= WORLD_SIZE ({})", e.world))
                .value_or(e.world));
    const std::string local_expect =
        fmt::format("this rank's GPU on its node, 0 <= LOCAL_RANK < {} ({})",
                    get("LOCAL_WORLD_SIZE") ? "LOCAL_WORLD_SIZE" : "WORLD_SIZE", e.local_world);
    auto lr = env_int(get, "LOCAL_RANK", 0, e.local_world - 1, local_expect);
    e.local_rank = int(e.world > 1 ? require(lr, "LOCAL_RANK", how) : lr.value_or(0));
    if (e.world > 1) {
      const char* addr = get("MASTER_ADDR");
      if (!addr || !*addr)
        STRATA_THROW(ConfigError,
                     fmt::format("environment variable MASTER_ADDR is not set: expected the host name or address of "
                                 "rank 0's node ({})",
                                 how),
                     "environment", "MASTER_ADDR");
      e.master_addr = addr;
      e.master_port = int(require(port(), "MASTER_PORT", how));
      // torchrun's agent serves its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 listens
      // on the port after it.
      const char* agent = get("TORCHELASTIC_USE_AGENT_STORE");
      if (agent &&
          (std::strcmp(agent, "True") == 0 || std::strcmp(agent, "true") == 0 || std::strcmp(agent, "1") == 0)) {
        if (e.master_port == 65535)
          STRATA_THROW(
              ConfigError,
              "MASTER_PORT=65535 under torchrun's agent store: strata's rendezvous listens on MASTER_PORT + 1; "
              "set STRATA_RENDEZVOUS_PORT to a free port 1-65535, or a lower MASTER_PORT",
              "environment", "MASTER_PORT");
        e.master_port += 1;
        e.port_name = "MASTER_PORT + 1, torchrun's agent store holding MASTER_PORT";
      }
    }
    if (const char* l = get("STRATA_LAUNCHER"); l && std::strcmp(l, "--gpus") == 0) e.launcher = "--gpus";
    rendezvous_port_override(get, e);
    job_secret(get, e);
    return e;
  }
  if (get("SLURM_PROCID")) {
    e.launcher = "slurm";
    const char* how = "srun sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID";
    auto ntasks = env_int(get, "SLURM_NTASKS", 1, kMax, "the number of tasks, an integer >= 1");
    if (!ntasks) ntasks = env_int(get, "SLURM_NPROCS", 1, kMax, "the number of tasks, an integer >= 1");
    e.world = int(require(ntasks, "SLURM_NTASKS", how));
    e.rank = int(
        *env_int(get, "SLURM_PROCID", 0, e.world - 1, fmt::format("0 <= SLURM_PROCID < SLURM_NTASKS ({})", e.world)));
    e.local_world = e.world;
    if (const char* t = get("SLURM_NTASKS_PER_NODE"); t && std::strspn(t, "0123456789") == std::strlen(t) && *t)
      e.local_world = int(*env_int(get, "SLURM_NTASKS_PER_NODE", 1, e.world,
                                   fmt::format("1 <= SLURM_NTASKS_PER_NODE <= SLURM_NTASKS ({})", e.world)));
    auto lr = env_int(get, "SLURM_LOCALID", 0, e.local_world - 1,
                      fmt::format("this task's GPU on its node, 0 <= SLURM_LOCALID < {}", e.local_world));
    e.local_rank = int(e.world > 1 ? require(lr, "SLURM_LOCALID", how) : lr.value_or(0));
    if (e.world > 1) {
      const char* addr = get("MASTER_ADDR");
      if (!addr || !*addr) addr = get("SLURM_LAUNCH_NODE_IPADDR");
      if (!addr || !*addr)
        STRATA_THROW(ConfigError,
                     "environment variables MASTER_ADDR and SLURM_LAUNCH_NODE_IPADDR are both unset: expected the "
                     "address of the node where task 0 runs (export MASTER_ADDR=$(scontrol show hostnames "
                     "\"$SLURM_JOB_NODELIST\" | head -n 1))",
                     "environment", "MASTER_ADDR");
      e.master_addr = addr;
      e.master_port = int(port().value_or(29500));
    }
    rendezvous_port_override(get, e);
    job_secret(get, e);
    return e;
  }
  return e;
}

std::optional<int> take_gpus_flag(int& argc, char** argv) {
  std::optional<int> n;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    if (a == "--gpus") {
      if (i + 1 >= argc)
        STRATA_THROW(ConfigError, "--gpus needs a value (the number of local GPUs)", "command line", "gpus");
      v = argv[++i];
    } else if (a.rfind("--gpus=", 0) == 0) {
      v = a.substr(7);
    } else {
      argv[out++] = argv[i];
      continue;
    }
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || errno == ERANGE || x < 1 || x > kMaxLocalGpus)
      STRATA_THROW(
          ConfigError,
          fmt::format("--gpus expects an integer from 1 to {} (GPUs on this node), got '{}'", kMaxLocalGpus, v),
          "command line", "gpus");
    n = int(x);
  }
  argc = out;
  argv[argc] = nullptr;
  return n;
}

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) {
  g_signal = sig;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return "stopped";
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) STRATA_THROW(IoError, "cannot read /proc/self/exe to re-execute this program", "/proc/self/exe");
  return std::string(buf, size_t(n));
}

}  // namespace

int run_local_ranks(const LocalLaunch& l, std::FILE* log) {
  if (l.nprocs < 1) STRATA_THROW(ConfigError, "run_local_ranks: nprocs must be >= 1", "command line", "gpus");
  const std::string exe = l.exe.empty() ? self_exe() : l.exe;
  const int port = l.master_port ? l.master_port : pick_free_port(l.master_addr);
  const std::string secret = l.secret.empty() ? to_hex(bytes_of(random_bytes(32))) : l.secret;
  // Built before fork: the child only calls async-signal-safe functions, then execve. Also dropped: torchrun's
  // agent-store flag (these ranks are strata's own; no agent holds MASTER_PORT).
  static const char* kSet[] = {"RANK",
                               "WORLD_SIZE",
                               "LOCAL_RANK",
                               "LOCAL_WORLD_SIZE",
                               "MASTER_ADDR",
                               "MASTER_PORT",
                               "TORCHELASTIC_USE_AGENT_STORE",
                               "STRATA_JOB_SECRET",
                               "STRATA_LAUNCHER"};
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) {
    bool ours = false;
    for (const char* k : kSet) ours = ours || (std::strncmp(*e, k, std::strlen(k)) == 0 && (*e)[std::strlen(k)] == '=');
    if (!ours) base.emplace_back(*e);
  }
  std::vector<std::string> argv_s{exe};
  argv_s.insert(argv_s.end(), l.args.begin(), l.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_signal = 0;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  const pid_t parent = ::getpid();

  std::vector<pid_t> pids(size_t(l.nprocs), -1);
  std::vector<int> status(size_t(l.nprocs), 0);
  std::vector<bool> alive(size_t(l.nprocs), false);
  int first_failed = -1;
  std::string failure;
  using Clock = std::chrono::steady_clock;
  Clock::time_point kill_at{};
  bool kill_pending = false;  // SIGKILL the rest at kill_at
  auto stop_all = [&](int sig) {
    for (size_t r = 0; r < pids.size(); ++r)
      if (alive[r]) ::kill(pids[r], sig);
  };

  for (int r = 0; r < l.nprocs; ++r) {
    std::vector<std::string> env_s = base;
    env_s.push_back(fmt::format("RANK={}", r));
    env_s.push_back(fmt::format("LOCAL_RANK={}", r));
    env_s.push_back(fmt::format("WORLD_SIZE={}", l.nprocs));
    env_s.push_back(fmt::format("LOCAL_WORLD_SIZE={}", l.nprocs));
    env_s.push_back("MASTER_ADDR=" + l.master_addr);
    env_s.push_back(fmt::format("MASTER_PORT={}", port));
    env_s.push_back("STRATA_JOB_SECRET=" + secret);  // never on a command line (ps shows those)
    env_s.push_back("STRATA_LAUNCHER=--gpus");
    std::vector<char*> envp;
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);                     // the terminal's Ctrl-C reaches the launcher only, which forwards it once
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher died (even by SIGKILL): so do the ranks
      if (::getppid() != parent) ::_exit(1);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::execve(exe.c_str(), argv.data(), envp.data());
      const char msg[] = "strata: execve of the rank's program failed\n";
      [[maybe_unused]] ssize_t w = ::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    if (pid < 0) {
      const int e = errno;
      stop_all(SIGKILL);
      for (size_t q = 0; q < pids.size(); ++q)
        if (alive[q]) ::waitpid(pids[q], nullptr, 0);
      ::sigaction(SIGINT, &old_int, nullptr);
      ::sigaction(SIGTERM, &old_term, nullptr);
      STRATA_THROW(Error, fmt::format("{}: cannot start rank {}: fork failed: {}", l.tool, r, std::strerror(e)));
    }
    pids[size_t(r)] = pid;
    alive[size_t(r)] = true;
  }

  int live = l.nprocs;
  while (live > 0) {
    if (int sig = g_signal) {
      g_signal = 0;
      std::fprintf(log, "%s: forwarding %s to %d rank%s\n", l.tool.c_str(), ::strsignal(sig), live,
                   live > 1 ? "s" : "");
      stop_all(sig);
    }
    for (int r = 0; r < l.nprocs; ++r) {
      if (!alive[size_t(r)]) continue;
      int st = 0;
      const pid_t got = ::waitpid(pids[size_t(r)], &st, WNOHANG);
      if (got != pids[size_t(r)]) continue;
      alive[size_t(r)] = false;
      status[size_t(r)] = st;
      --live;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && first_failed < 0) {
        first_failed = r;
        failure = describe(st);
        std::fprintf(log, "%s: rank %d (pid %d) %s; stopping the other %d rank%s\n", l.tool.c_str(), r,
                     int(pids[size_t(r)]), failure.c_str(), live, live == 1 ? "" : "s");
        stop_all(SIGTERM);
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(l.grace_s));
        kill_pending = true;
      }
    }
    if (kill_pending && Clock::now() >= kill_at && live > 0) {
      std::fprintf(log, "%s: %d rank%s still running %.0f s after SIGTERM: sending SIGKILL\n", l.tool.c_str(), live,
                   live > 1 ? "s" : "", l.grace_s);
      stop_all(SIGKILL);
      kill_pending = false;
    }
    if (live > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (first_failed < 0) return 0;
  std::fprintf(log, "%s: the job failed: rank %d %s first\n", l.tool.c_str(), first_failed, failure.c_str());
  const int st = status[size_t(first_failed)];
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

std::optional<int> launch_hook(int& argc, char** argv, const char* tool, bool ranks_supported) {
  try {
    const std::optional<int> gpus = take_gpus_flag(argc, argv);
    const LaunchEnv env = read_launch_env();
    if (gpus && *gpus > 1 && env.world > 1)
      STRATA_THROW(ConfigError,
                   fmt::format("--gpus {} inside a job of {} ranks (the {} environment): start the ranks one way, "
                               "with --gpus or with the launcher",
                               *gpus, env.world, env.launcher),
                   "command line", "gpus");
    const int ranks = gpus && *gpus > 1 ? *gpus : env.world;
    if (ranks > 1 && !ranks_supported)
      STRATA_THROW(UnsupportedError,
                   fmt::format("{}: training on {} ranks ({}) is not supported yet: the launcher, the rendezvous and "
                               "the communicators exist (issue 18), but the trainer's data-parallel integration (the "
                               "gradient all-reduce, a data slice per rank) does not; run one process with --gpus 1",
                               tool, ranks, gpus && *gpus > 1 ? fmt::format("--gpus {}", *gpus) : env.launcher));
    if (gpus && *gpus > 1) {
      LocalLaunch l;
      l.nprocs = *gpus;
      // MASTER_PORT from the environment (a free one when unset); the address is always loopback.
      l.master_port = int(env_int(process_env, "MASTER_PORT", 1, 65535,
                                  "a TCP port 1-65535 for --gpus' rank 0 to listen on (unset: a free port)")
                              .value_or(0));
      l.tool = tool;
      for (int i = 1; i < argc; ++i) l.args.emplace_back(argv[i]);
      return run_local_ranks(l);
    }
  } catch (const UnsupportedError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace strata

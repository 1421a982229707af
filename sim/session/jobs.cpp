#include "session/jobs.hpp"

#include "session/run.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "config/document.hpp"
#include "network/accelerator.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"
#include "report/trace_sink.hpp"
#include "report/trace_writer.hpp"
#include "schedule/schedule.hpp"
#include "topology/topology_yaml.hpp"

namespace cs::api {

const char* placement_name(Placement p) {
    return name_of(kPlacementNames, p).data();
}

std::vector<int> place_gpus(const topology::Cluster& cluster, Placement kind, int count,
                            const std::vector<std::uint8_t>& taken) {
    std::vector<int> free;
    for (int g = 0; g < cluster.gpu_count(); ++g)
        if (!taken[static_cast<std::size_t>(g)]) free.push_back(g);
    if (count < 1 || static_cast<int>(free.size()) < count) return {};
    std::vector<int> out;
    switch (kind) {
        case Placement::Rail: {
            // Local index of every GPU inside its node: its position among the node's GPUs in
            // number order.
            std::map<int, int> next_local;                           // node -> GPUs seen so far
            std::vector<std::pair<std::pair<int, int>, int>> order;  // ((local, node), gpu)
            for (int g = 0; g < cluster.gpu_count(); ++g) {
                const int node = cluster.node_of_gpu(g);
                const int local = next_local[node]++;
                if (!taken[static_cast<std::size_t>(g)]) order.push_back({{local, node}, g});
            }
            std::sort(order.begin(), order.end());
            for (int i = 0; i < count; ++i)
                out.push_back(order[static_cast<std::size_t>(i)].second);
            break;
        }
        case Placement::Scattered: {
            const auto f = static_cast<std::int64_t>(free.size());
            for (std::int64_t r = 0; r < count; ++r)
                out.push_back(free[static_cast<std::size_t>(r * f / count)]);
            break;
        }
        case Placement::Contiguous:
        case Placement::Explicit:
            out.assign(free.begin(), free.begin() + count);
            break;
    }
    return out;
}

namespace {

// A top-level `jobs:` key in the document `load` gives; false when it throws ConfigError.
bool has_jobs_key(const std::function<config::Document()>& load) {
    try {
        const config::Document doc = load();
        const YAML::Node& root = doc.root;
        return root.IsMap() && root["jobs"].IsDefined();
    } catch (const ConfigError&) {
        return false;
    }
}

}  // namespace

bool is_jobs_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    return has_jobs_key([&] { return config::load_document(path); });
}

bool is_jobs_text(const workload::ExperimentText& text) {
    return has_jobs_key(
        [&] { return config::parse_document(text.text, text.display_path, text.folder); });
}

namespace {

std::string layout_text(const workload::ParallelLayout& l) {
    return "tp x cp x dp x pp = " + std::to_string(l.tp) + " x " + std::to_string(l.cp) + " x " +
           std::to_string(l.dp) + " x " + std::to_string(l.pp) + " = " +
           std::to_string(l.world_size());
}

// The topology the jobs share: a file, which a job's experiment may name too. Sets
// out.topology_source and out.cluster; returns the file's canonical path.
std::filesystem::path load_shared_topology(const config::Document& doc, const config::Reader& root,
                                           std::int64_t max_memory, JobsSpec& out) {
    const YAML::Node topo = root.value("topology");
    if (!topo.IsDefined() || topo.IsNull())
        root.fail("topology", "missing; expected the path of the topology file the jobs share");
    if (!topo.IsScalar())
        root.fail("topology",
                  "expected the path of a topology file (a jobs file names its topology by "
                  "file, so that the jobs' own experiments can name the same file)");
    const std::filesystem::path topo_path = doc.resolve(topo);
    config::Document tdoc;
    try {
        tdoc = config::load_document(topo_path);
    } catch (const ConfigError& e) {
        if (e.where().line > 0) throw;
        root.fail("topology", "cannot load \"" + topo.Scalar() + "\" (" + topo_path.string() +
                                  "): " + e.message());
    }
    tdoc.override_prefix = "topology.";
    out.topology_source = tdoc.display_path;
    out.cluster =
        std::make_shared<const topology::Cluster>(topology::load_cluster(tdoc, max_memory));
    return std::filesystem::weakly_canonical(topo_path);
}

// Job `j`'s experiment document: a file (relative to the jobs file) or an inline mapping, on the
// jobs file's topology (`out`'s, at `canonical_topology`).
config::Document job_experiment_document(const config::Document& doc, const config::Reader& j,
                                         const JobsSpec& out,
                                         const std::filesystem::path& canonical_topology) {
    const YAML::Node e = j.value("experiment");
    config::Document edoc;
    if (e.IsDefined() && e.IsScalar()) {
        try {
            edoc = config::load_document(doc.resolve(e));
        } catch (const ConfigError& err) {
            if (err.where().line > 0) throw;
            j.fail("experiment", "cannot load \"" + e.Scalar() + "\": " + err.message());
        }
    } else if (e.IsDefined() && e.IsMap()) {
        edoc = doc;
        edoc.root.reset(e);
        edoc.overrides.clear();
    } else {
        j.fail("experiment", std::string(e.IsDefined() ? "expected" : "missing; expected") +
                                 " the path of an experiment file or an inline experiment mapping");
    }
    const YAML::Node& eroot = edoc.root;
    // A jobs file (or mapping) as a job's experiment: jobs do not nest.
    if (eroot.IsMap() && eroot["jobs"].IsDefined())
        j.fail("experiment",
               "is a jobs file (it has a 'jobs' key); a job's experiment is one "
               "experiment: list its jobs in this file instead");
    const YAML::Node et = eroot["topology"];
    if (et.IsDefined() && !et.IsNull()) {
        const bool same = et.IsScalar() &&
                          std::filesystem::weakly_canonical(edoc.resolve(et)) == canonical_topology;
        if (!same)
            config::root_reader(edoc).fail(
                "topology", "a job runs on the jobs file's topology (" + out.topology_source +
                                "); this experiment names another: remove its "
                                "'topology' or name the same file");
    } else {
        // The one write into a document: the experiment loader reads the topology from
        // its `topology` key, which a job may leave out. For an inline experiment this
        // adds the key to the jobs file's parsed tree, which nothing reads afterwards.
        edoc.root["topology"] = canonical_topology.string();
    }
    return edoc;
}

// Job `j` of the jobs file: its name, unique among `names` (the jobs read so far, each with its
// index), and its experiment, refused where a shared fabric does not simulate it.
JobSpec load_job(const config::Document& doc, const config::Reader& j, const JobsSpec& out,
                 std::map<std::string, std::size_t>& names,
                 const std::filesystem::path& canonical_topology, std::int64_t max_memory) {
    JobSpec job;
    job.where = j.location();
    job.name = j.string("name");
    if (job.name.empty()) j.fail("name", "must not be empty");
    if (const auto it = names.find(job.name); it != names.end())
        j.fail("name", "duplicate job name '" + job.name + "' (job " + std::to_string(it->second) +
                           " has it too); every job needs its own name");
    names.emplace(job.name, out.jobs.size());

    // Unknown keys first: a misspelt `placement` must not surface as a placement error.
    j.has("experiment");
    j.has("placement");
    j.finish();

    config::Document edoc = job_experiment_document(doc, j, out, canonical_topology);
    job.experiment = workload::load_job_experiment(edoc, max_memory);
    const config::Reader er = config::root_reader(edoc);
    if (job.experiment.variability.any())
        er.fail("variability",
                "is not supported in a jobs file's experiment yet (a shared "
                "fabric simulates each job without stragglers)");
    if (job.experiment.faults.any())
        er.fail("faults",
                "is not supported in a jobs file's experiment yet (a shared "
                "fabric simulates each job without faults)");
    if (job.experiment.goodput.present)
        er.fail("goodput", "is not supported in a jobs file's experiment yet");
    job.experiment.cluster = out.cluster;
    if (!out.jobs.empty() &&
        job.experiment.network.fidelity != out.jobs.front().experiment.network.fidelity)
        er.fail("network",
                "every job of a shared fabric runs on one network model: this "
                "job's network.model differs from that of the first job ('" +
                    out.jobs.front().name + "')");
    return job;
}

// The GPUs a job names (`placement: {gpus: ...}` or `{nodes: ...}`): as many as it needs, none
// `taken` by another job of `out` (`owner`: which).
void place_explicit(const JobsSpec& out, const config::Reader& j,
                    const std::vector<std::uint8_t>& taken, const std::vector<int>& owner,
                    JobSpec& job) {
    const int need = job.experiment.layout.world_size();
    const config::Reader pr = j.map("placement");
    job.placement = Placement::Explicit;
    job.gpus = workload::gpu_set(pr, *out.cluster);
    pr.finish();
    if (static_cast<int>(job.gpus.size()) != need)
        j.fail("placement", "names " + std::to_string(job.gpus.size()) + " GPU" +
                                (job.gpus.size() == 1 ? "" : "s") + " (" +
                                workload::gpu_list_text(job.gpus) + "), but job '" + job.name +
                                "' needs " + std::to_string(need) + " (" +
                                layout_text(job.experiment.layout) + ")");
    std::vector<int> clash;
    int other = -1;
    for (int g : job.gpus)
        if (taken[static_cast<std::size_t>(g)]) {
            clash.push_back(g);
            if (other < 0) other = owner[static_cast<std::size_t>(g)];
        }
    if (!clash.empty())
        j.fail("placement", "GPU" + std::string(clash.size() == 1 ? " " : "s ") +
                                workload::gpu_list_text(clash) +
                                (clash.size() == 1 ? " already belongs" : " already belong") +
                                " to job '" + out.jobs[static_cast<std::size_t>(other)].name +
                                "'; jobs may not share GPUs");
}

// What `placement:` accepts, for messages: the kinds a job asks for by name (kPlacementNames but
// "explicit", which names how a job that lists its GPUs was placed), or a mapping.
const std::string kPlacementChoices = [] {
    std::string kinds;
    for (const auto& row : kPlacementNames)
        if (row.value != Placement::Explicit) kinds += std::string(row.name) + ", ";
    return kinds + "or a mapping {gpus: ...} or {nodes: ...} naming the job's GPUs";
}();

// The GPUs of a job placed by kind (contiguous, the default, rail or scattered) on those not
// `taken`.
void place_by_kind(const config::Reader& j, const YAML::Node& p, const topology::Cluster& cluster,
                   const std::vector<std::uint8_t>& taken, JobSpec& job) {
    const int need = job.experiment.layout.world_size();
    if (p.IsDefined() && !p.IsScalar()) j.fail("placement", "expected " + kPlacementChoices);
    const std::string kind = p.IsDefined() ? p.Scalar() : "contiguous";
    const auto named = find_named(kPlacementNames, kind);
    if (named && *named != Placement::Explicit)
        job.placement = *named;
    else
        j.fail("placement", "unknown placement '" + kind + "'; expected " + kPlacementChoices);
    job.gpus = place_gpus(cluster, job.placement, need, taken);
    if (job.gpus.empty()) {
        const auto free = static_cast<int>(std::count(taken.begin(), taken.end(), 0));
        j.fail(p.IsDefined() ? "placement" : "name",
               "job '" + job.name + "' needs " + std::to_string(need) + " GPUs (" +
                   layout_text(job.experiment.layout) + "), but only " + std::to_string(free) +
                   " of the topology's " + std::to_string(cluster.gpu_count()) +
                   " are free once the other jobs are placed");
    }
}

JobsSpec load_jobs_document(const config::Document& doc, std::int64_t max_memory) {
    JobsSpec out;
    out.source = doc.display_path;
    const config::Reader root = config::root_reader(doc);
    const auto canonical_topology = load_shared_topology(doc, root, max_memory, out);

    const YAML::Node list = root.value("jobs");
    if (!list.IsDefined() || list.IsNull() || (list.IsSequence() && list.size() == 0))
        root.fail("jobs", "expected a non-empty list of jobs, each {name, experiment, placement}");
    const auto entries = root.list_of_maps("jobs");
    out.iterations = static_cast<int>(root.count_or("iterations", 1, 1));
    if (out.iterations > kMaxJobIterations)
        root.fail("iterations", "at most " + std::to_string(kMaxJobIterations) +
                                    " iterations per job, found " + std::to_string(out.iterations));
    root.has("name");
    root.has("description");
    root.finish();

    std::map<std::string, std::size_t> names;
    for (const auto& j : entries)
        out.jobs.push_back(load_job(doc, j, out, names, canonical_topology, max_memory));

    // Placements: explicit ones first (they name their GPUs), then the others in list order on
    // the GPUs left.
    const auto& cluster = *out.cluster;
    std::vector<std::uint8_t> taken(static_cast<std::size_t>(cluster.gpu_count()), 0);
    std::vector<int> owner(static_cast<std::size_t>(cluster.gpu_count()), -1);
    for (int pass = 0; pass < 2; ++pass) {
        for (std::size_t i = 0; i < entries.size(); ++i) {
            const auto& j = entries[i];
            auto& job = out.jobs[i];
            const YAML::Node p = j.value("placement");
            const bool explicit_gpus = p.IsDefined() && p.IsMap();
            if ((pass == 0) != explicit_gpus) continue;
            if (explicit_gpus)
                place_explicit(out, j, taken, owner, job);
            else
                place_by_kind(j, p, cluster, taken, job);
            for (int g : job.gpus) {
                taken[static_cast<std::size_t>(g)] = 1;
                owner[static_cast<std::size_t>(g)] = static_cast<int>(i);
            }
        }
    }
    return out;
}

// Job k's network tokens in its iteration i are k << 40 + i << 32 + message (iterations up to
// kMaxJobIterations < 256, messages of one iteration below 2^32).
constexpr int kTokenShift = 40;
constexpr int kIterationShift = 32;
constexpr std::size_t kIterationTokens = 256;

// Hands each finished transfer to the job and iteration whose token range it is in.
class JobClients final : public network::TransferClient {
  public:
    std::vector<std::vector<replay::Replay*>> replays;  // [job][iteration]
    void on_transfer_done(Simulation& sim, std::uint64_t token) override {
        const auto job = static_cast<std::size_t>(token >> kTokenShift);
        const auto iteration = static_cast<std::size_t>((token >> kIterationShift) & 0xff);
        replays[job][iteration]->on_transfer_done(sim, token);
    }
};

// Bytes per link and job: a flow belongs to the job of the GPU its route leaves (or, for flows
// that start at a switch, the GPU it reaches).
class JobBytes final : public network::NetworkObserver {
  public:
    JobBytes(const topology::Cluster& cluster, std::vector<int> job_of_gpu, std::size_t jobs)
        : cluster_(cluster),
          job_of_gpu_(std::move(job_of_gpu)),
          jobs_(jobs),
          bytes_(cluster.links().size() * jobs, 0.0) {}
    void on_flow_start(const FlowStart& flow) override {
        if (flow.path.empty()) return;
        const auto& links = cluster_.links();
        int gpu = cluster_.devices()[links[flow.path.front()].from].gpu;
        if (gpu < 0) gpu = cluster_.devices()[links[flow.path.back()].to].gpu;
        if (gpu < 0) return;
        const int job = job_of_gpu_[static_cast<std::size_t>(gpu)];
        if (job < 0) return;
        for (topology::LinkId l : flow.path)
            bytes_[l * jobs_ + static_cast<std::size_t>(job)] += flow.bytes;
    }
    bool wants_link_rates() const override { return false; }
    double bytes(topology::LinkId link, std::size_t job) const {
        return bytes_[link * jobs_ + job];
    }

  private:
    const topology::Cluster& cluster_;
    std::vector<int> job_of_gpu_;
    std::size_t jobs_;
    std::vector<double> bytes_;
};

// One job's view of the shared trace file: the processes its writer makes ("node N", "cluster")
// become groups inside one process per job ("job NAME", pid = job + 1), and its track uuids and
// flow ids move into the job's own range, so that the jobs' writers never collide.
class JobTraceSink final : public report::TraceSink {
  public:
    JobTraceSink(report::TraceSink& file, std::size_t job, std::string name)
        : file_(file), job_(job), name_(std::move(name)) {}
    void process(std::uint64_t uuid, int pid, const std::string& name) override {
        if (!created_) {
            file_.process(map(0), static_cast<int>(job_) + 1, "job " + name_);
            created_ = true;
        }
        file_.group(map(uuid), map(0), name, pid);
    }
    void group(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
               int rank) override {
        file_.group(map(uuid), map(parent), name, rank);
    }
    void track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
               int rank) override {
        file_.track(map(uuid), map(parent), name, rank);
    }
    void counter_track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                       const std::string& unit, int rank) override {
        file_.counter_track(map(uuid), map(parent), name, unit, rank);
    }
    void slice(const report::TraceSlice& slice,
               const std::vector<report::TraceSlice>& children) override {
        std::vector<report::TraceSlice> moved = children;
        for (auto& c : moved)
            shift(c);
        report::TraceSlice s = slice;
        shift(s);
        file_.slice(s, moved);
    }
    void instant(std::uint64_t track, Time at, const std::string& name,
                 const report::TraceArgs& args) override {
        file_.instant(map(track), at, name, args);
    }
    void counter(std::uint64_t track, Time at, double value) override {
        file_.counter(map(track), at, value);
    }
    void finish(const report::TraceArgs&) override {}  // the file is finished once, by its owner

  private:
    // The writers number uuids and flows from 1: job k's are moved above (k + 1) x 2^40, and
    // (k + 1) x 2^40 itself is the job's process.
    std::uint64_t map(std::uint64_t id) const { return id + ((job_ + 1) << 40); }
    void shift(report::TraceSlice& s) const {
        s.track = map(s.track);
        for (auto& f : s.flows)
            f.id = map(f.id);
    }
    report::TraceSink& file_;
    std::uint64_t job_;
    std::string name_;
    bool created_ = false;
};

// The links that two or more of the `jobs` sent over, most bytes first (then by name): each job's
// bytes, and how long the link was busy and shared, against the makespan.
std::vector<ContestedLink> contested_links(const topology::Cluster& cluster,
                                           const report::LinkAccounting& accounting,
                                           const JobBytes& job_bytes, std::size_t jobs,
                                           double makespan_s) {
    std::vector<ContestedLink> out;
    const auto& links = cluster.links();
    for (topology::LinkId l = 0; l < links.size(); ++l) {
        ContestedLink c;
        int jobs_on = 0;
        for (std::size_t k = 0; k < jobs; ++k) {
            c.bytes.push_back(job_bytes.bytes(l, k));
            if (c.bytes.back() > 0) ++jobs_on;
        }
        if (jobs_on < 2) continue;
        c.name = cluster.link_name(l);
        const auto& st = accounting.links()[l];
        c.busy_s = st.busy.seconds();
        c.shared_s = st.shared.seconds();
        c.busy_share = makespan_s > 0 ? c.busy_s / makespan_s : 0;
        out.push_back(std::move(c));
    }
    const auto total = [](const ContestedLink& c) {
        double t = 0;
        for (double b : c.bytes)
            t += b;
        return t;
    };
    std::stable_sort(out.begin(), out.end(), [&](const ContestedLink& a, const ContestedLink& b) {
        const double ta = total(a), tb = total(b);
        if (ta != tb) return ta > tb;
        return a.name < b.name;
    });
    return out;
}

// The summary of a job's reported iteration (its wall time 0: the jobs share one run).
report::Summary job_summary(const replay::PreparedIteration& p, const replay::Replay& replay,
                            const report::MetricsObserver& metrics,
                            const replay::ReplayResult& result) {
    report::SummaryInputs in;
    in.spec = &p.spec;
    in.plan = &p.plan;
    in.replay = &replay;
    in.metrics = &metrics;
    in.result = result;
    in.schedule = p.spec.schedule;
    in.peak_inflight = p.peak_inflight;
    report::Summary summary = report::summarize(in);
    summary.wall_time_s = 0;
    return summary;
}

// Each iteration's time from the ends of a job's iterations, back to back from 0.
std::vector<double> iteration_times(const std::vector<Time>& ends) {
    std::vector<double> times;
    Time from = Time::zero();
    for (Time e : ends) {
        times.push_back((e - from).seconds());
        from = e;
    }
    return times;
}

// The trace writer of job k's reported iteration: into the shared trace file (JobTraceSink), with
// no link counters (every job's writer would see all the links).
std::unique_ptr<report::TraceWriter> job_trace_writer(const std::filesystem::path& path,
                                                      report::TraceSink& file, std::size_t k,
                                                      const std::string& name,
                                                      const replay::PreparedIteration& p,
                                                      replay::Replay& r) {
    report::TraceOptions topts;
    topts.links = report::TraceLinks::None;
    report::TraceSink* sink = &file;
    topts.open_sink = [sink, k, name] {
        return std::unique_ptr<report::TraceSink>(std::make_unique<JobTraceSink>(*sink, k, name));
    };
    auto writer = std::make_unique<report::TraceWriter>(
        path, report::TraceContext::of(p.spec, p.plan, r), topts);
    r.add_observer(*writer);
    return writer;
}

// JobsOptions::on_progress's count, shared by the shared run and the alone runs.
struct JobsProgress {
    const std::function<void(std::size_t, std::size_t)>& call;
    std::size_t done = 0, total = 0;
    void tell() const { call(done, total); }
};

// Tells JobsProgress of every pass of one job iteration. Its notifications carry no per-worker
// record, so a folded replica's passes need no copying (a FollowerCopier with nothing to copy).
class PassTicker final : public replay::ReplayObserver, public replay::FollowerCopier {
  public:
    explicit PassTicker(const JobsProgress& progress) : progress_(progress) {}
    void on_pass(const replay::PassRecord&) override { progress_.tell(); }
    void copy_worker(int, int) override {}

  private:
    const JobsProgress& progress_;
};

struct Simulated {
    std::vector<report::Summary> summaries;            // per job of the subset
    std::vector<std::vector<double>> iteration_times;  // per job: each completed iteration
    std::vector<ContestedLink> links;
    double makespan_s = 0;
    std::string fold_refused;
};

// One job's part of a shared run: a replay and metrics per iteration started (replays stay alive
// to the end: the engine holds their handlers; a job's next iteration starts from inside its
// last one's completion), the ends of those completed, and the trace writer of its reported
// iteration.
struct JobRun {
    std::unique_ptr<report::TraceWriter> writer;
    std::vector<std::unique_ptr<replay::Replay>> replays;
    std::vector<std::unique_ptr<report::MetricsObserver>> metrics;
    std::vector<std::unique_ptr<PassTicker>> tickers;  // with JobsOptions::on_progress
    std::vector<Time> ends;
};

// Which of the jobs `which` each GPU of `cluster` runs (-1: none).
std::vector<int> jobs_by_gpu(const JobsSpec& spec, const std::vector<std::size_t>& which,
                             const topology::Cluster& cluster) {
    std::vector<int> job_of_gpu(static_cast<std::size_t>(cluster.gpu_count()), -1);
    for (std::size_t k = 0; k < which.size(); ++k)
        for (int g : spec.jobs[which[k]].gpus)
            job_of_gpu[static_cast<std::size_t>(g)] = static_cast<int>(k);
    return job_of_gpu;
}

// A job runs on while the others finish theirs; its tokens hold 256 iterations (and each
// iteration keeps its replay). Iteration times that far apart overflowed the token and crashed
// (found by fuzzing, issue 40): refused, with this error.
ConfigError too_many_iterations(const JobSpec& job_spec, const std::string& job, std::size_t i,
                                int iterations) {
    // At the job's entry (the file's name alone said no line).
    return ConfigError(
        job_spec.where,
        "job '" + job + "' would start its " + std::to_string(i + 1) +
            "th iteration before the others end their " + std::to_string(iterations) +
            ": the jobs' iteration times differ by more than " + std::to_string(kIterationTokens) +
            " times, more than a shared run holds; simulate them apart");
}

// What the shared run of the jobs `which` gives once it ended (at `now`): each job's reported
// iteration (the `iterations`-th; under `alone`, that job's only), its iteration times, the
// makespan; the trace writers finished.
Simulated collect(const JobsSpec& spec, const std::vector<replay::PreparedIteration>& prepared,
                  const std::vector<std::size_t>& which, int iterations,
                  std::optional<std::size_t> alone, std::vector<JobRun>& runs, Time now) {
    Simulated out;
    for (std::size_t k = 0; k < which.size(); ++k) {
        if (alone && *alone != k) continue;
        auto& run = runs[k];
        const std::size_t reported = static_cast<std::size_t>(iterations) - 1;
        if (run.ends.size() <= reported)
            throw SimulationError("jobs",
                                  "job '" + spec.jobs[which[k]].name + "' completed " +
                                      std::to_string(run.ends.size()) + " of " +
                                      std::to_string(iterations) + " iterations",
                                  now);
        const replay::ReplayResult result = run.replays[reported]->finish();
        out.summaries.push_back(job_summary(prepared[which[k]], *run.replays[reported],
                                            *run.metrics[reported], result));
        out.iteration_times.push_back(iteration_times(run.ends));
        if (run.writer) run.writer->finish(report::trace_summary(out.summaries.back()));
        out.makespan_s = std::max(out.makespan_s, run.ends[reported].seconds());
        if (out.fold_refused.empty()) out.fold_refused = result.fold_refused;
    }
    return out;
}

// The jobs `which` of `prepared` on one network: each job runs its iterations back to back (the
// next starts when the last ends) until every job has completed `iterations` of them; each job's
// summary is that of its `iterations`-th iteration (the trace shows that one too).
//
// `alone` (a job index) runs that job only, the others built but never started: every job's
// communicators are then registered in the same order as in the shared run, so that the job's
// collectives take the same ECMP routes alone as shared (a plan's route salt is its group id)
// and the slowdown measures contention, not a different draw of routes.
Simulated simulate(const JobsSpec& spec, const std::vector<replay::PreparedIteration>& prepared,
                   const std::vector<std::size_t>& which, int iterations, network::KeptState* kept,
                   const JobsOptions* options, JobsProgress* progress,
                   std::optional<std::size_t> alone = std::nullopt) {
    const auto& cluster = *spec.cluster;
    const auto& first = prepared[which.front()].spec;
    Simulation sim(first.seed);
    auto network = network::make_network(sim, cluster, first.network, kept);
    replay::FastPaths fast;
    fast.enabled = kept != nullptr;
    fast.network = kept;
    JobClients clients;
    network->set_client(&clients);
    network->reuse_groups();  // a job's later iterations keep its communicators and routes
    report::LinkAccounting accounting(cluster.links().size());
    JobBytes job_bytes(cluster, jobs_by_gpu(spec, which, cluster), which.size());
    network->add_observer(&accounting);
    network->add_observer(&job_bytes);

    // The trace: one file, one process per job (JobTraceSink), no link counters (every job's
    // writer would see all the links); each job's reported iteration only.
    std::unique_ptr<report::TraceSink> trace_file;
    if (options && options->trace)
        trace_file = report::make_trace_sink(*options->trace, options->outputs);

    std::vector<JobRun> runs(which.size());
    clients.replays.resize(which.size());
    std::size_t behind = alone ? 1 : which.size();  // jobs with fewer than `iterations` done
    std::function<void(std::size_t)> launch;
    const auto build = [&](std::size_t k) -> replay::Replay& {
        const auto& p = prepared[which[k]];
        auto& run = runs[k];
        const auto i = run.replays.size();
        if (i >= kIterationTokens)
            throw too_many_iterations(spec.jobs[which[k]], spec.jobs[which[k]].name, i, iterations);
        replay::SharedFabric fabric;
        fabric.sim = &sim;
        fabric.network = network.get();
        fabric.token_base = (static_cast<std::uint64_t>(k) << kTokenShift) +
                            (static_cast<std::uint64_t>(i) << kIterationShift);
        fabric.placement = spec.jobs[which[k]].gpus;
        fabric.on_complete = [&, k](Time end) {
            runs[k].ends.push_back(end);
            if (progress && runs[k].ends.size() <= static_cast<std::size_t>(iterations)) {
                ++progress->done;
                progress->tell();
            }
            if (runs[k].ends.size() == static_cast<std::size_t>(iterations) && --behind == 0) {
                sim.stop();
                return;
            }
            launch(k);
        };
        auto& r = *run.replays.emplace_back(
            std::make_unique<replay::Replay>(p.spec, p.plan, *p.schedule, p.shape, &fabric, fast));
        auto& m = *run.metrics.emplace_back(
            std::make_unique<report::MetricsObserver>(r.workers().size()));
        r.add_observer(m);
        if (progress)
            r.add_observer(*run.tickers.emplace_back(std::make_unique<PassTicker>(*progress)));
        clients.replays[k].push_back(&r);
        if (trace_file && i + 1 == static_cast<std::size_t>(iterations))
            run.writer =
                job_trace_writer(*options->trace, *trace_file, k, spec.jobs[which[k]].name, p, r);
        return r;
    };
    launch = [&](std::size_t k) { build(k).start(); };
    for (std::size_t k = 0; k < which.size(); ++k) {
        auto& r = build(k);
        if (!alone || *alone == k) r.start();
    }
    sim.run();
    Simulated out = collect(spec, prepared, which, iterations, alone, runs, sim.now());
    if (trace_file)
        trace_file->finish(
            {report::TraceArg::integer("jobs", static_cast<std::int64_t>(which.size())),
             report::TraceArg::real("makespan_s", out.makespan_s)});
    out.links = contested_links(cluster, accounting, job_bytes, which.size(), out.makespan_s);
    return out;
}

}  // namespace

JobsSpec load_jobs(const std::filesystem::path& path, std::int64_t max_memory) {
    return load_jobs_document(config::load_document(path), max_memory);
}

JobsSpec load_jobs(const workload::ExperimentText& text, std::int64_t max_memory) {
    return load_jobs_document(config::parse_document(text.text, text.display_path, text.folder),
                              max_memory);
}

namespace {

JobsResult run_jobs_unchecked(const JobsSpec& spec, const JobsOptions& options) {
    JobsResult out;
    std::vector<replay::PreparedIteration> prepared;
    // The shared run holds every job at once: the jobs' sizes are summed, each checked as it is
    // prepared (before its orders are built).
    double need = 0;
    replay::PrepareOptions how;
    how.admit = [&](const replay::PreparedIteration& it) {
        need += estimate_run_bytes(it.spec, it.shape.chunks);
        if (need <= static_cast<double>(options.max_memory)) return;
        char text[32];
        std::snprintf(text, sizeof text, "%.3g", need / 1e9);
        throw ConfigError(SourceLocation{spec.source},
                          std::string("the shared run of these jobs would need at least ") + text +
                              " GB of memory, more than the limit of " +
                              format_bytes(Bytes{options.max_memory}) +
                              "; use fewer microbatches or GPUs, or raise the limit with "
                              "--max-memory");
    };
    for (const auto& job : spec.jobs) {
        prepared.push_back(replay::prepare(job.experiment, "", how));
        for (const auto& w : prepared.back().warnings)
            out.warnings.push_back("job '" + job.name + "': " + w);
    }
    std::vector<std::size_t> all;
    for (std::size_t k = 0; k < spec.jobs.size(); ++k)
        all.push_back(k);
    // What the jobs' networks keep for each other (none without fast paths).
    std::optional<network::KeptState> kept;
    if (options.fast_paths) kept.emplace(*spec.cluster);
    network::KeptState* keep = kept ? &*kept : nullptr;
    std::optional<JobsProgress> progress;
    if (options.on_progress)
        progress.emplace(
            JobsProgress{options.on_progress, 0,
                         spec.jobs.size() * (static_cast<std::size_t>(spec.iterations) + 1)});
    JobsProgress* tell = progress ? &*progress : nullptr;
    Simulated shared = simulate(spec, prepared, all, spec.iterations, keep, &options, tell);
    out.links = std::move(shared.links);
    out.makespan_s = shared.makespan_s;
    out.iterations = spec.iterations;
    out.fold_refused = shared.fold_refused;
    for (std::size_t k = 0; k < spec.jobs.size(); ++k) {
        JobResult j;
        j.name = spec.jobs[k].name;
        j.placement = spec.jobs[k].placement;
        j.gpus = spec.jobs[k].gpus;
        j.shared = shared.summaries[k];
        j.shared_iteration_times_s = shared.iteration_times[k];
        // Alone, a job's iterations are all alike: one is simulated.
        j.alone = simulate(spec, prepared, all, 1, keep, nullptr, tell, k).summaries.front();
        j.slowdown = j.alone.iteration_time_s > 0
                         ? j.shared.iteration_time_s / j.alone.iteration_time_s
                         : 1.0;
        out.jobs.push_back(std::move(j));
    }
    return out;
}

}  // namespace

JobsResult run_jobs(const JobsSpec& spec, const JobsOptions& options) {
    try {
        return run_jobs_unchecked(spec, options);
    } catch (const ClockOverflow& e) {
        // As in api::run: every time of the shared run comes from the jobs' inputs.
        throw ConfigError(SourceLocation{spec.source},
                          "a time in this shared run is longer than the simulator's clock can "
                          "hold (2^63 ps, about 106 days): " +
                              std::string(e.what()) +
                              "; check the jobs' durations, sizes and rates");
    } catch (const NoPathError& e) {
        throw unreachable_gpu_error(e, SourceLocation{spec.source},
                                    ", which a job sends data between,");
    }
}

nlohmann::ordered_json to_json(const JobsResult& r) {
    nlohmann::ordered_json j;
    j["makespan_s"] = r.makespan_s;
    j["iterations"] = r.iterations;
    j["fold_refused"] = r.fold_refused;
    auto& jobs = j["jobs"] = nlohmann::ordered_json::array();
    for (const auto& job : r.jobs) {
        auto shared = report::to_json(job.shared);
        auto alone = report::to_json(job.alone);
        shared.erase("wall_time_s");
        alone.erase("wall_time_s");
        jobs.push_back({{"name", job.name},
                        {"placement", placement_name(job.placement)},
                        {"gpus", workload::gpu_list_text([&] {
                             auto g = job.gpus;
                             std::sort(g.begin(), g.end());
                             return g;
                         }())},
                        {"rank_gpus", job.gpus},
                        {"iteration_time_s", job.shared.iteration_time_s},
                        {"alone_iteration_time_s", job.alone.iteration_time_s},
                        {"slowdown", job.slowdown},
                        {"shared_iteration_times_s", job.shared_iteration_times_s},
                        {"shared", shared},
                        {"alone", alone}});
    }
    auto& links = j["contested_links"] = nlohmann::ordered_json::array();
    for (const auto& l : r.links) {
        nlohmann::ordered_json per = nlohmann::ordered_json::object();
        for (std::size_t k = 0; k < l.bytes.size() && k < r.jobs.size(); ++k)
            per[r.jobs[k].name] = l.bytes[k];
        links.push_back({{"name", l.name},
                         {"bytes", per},
                         {"busy_s", l.busy_s},
                         {"shared_s", l.shared_s},
                         {"busy_share", l.busy_share}});
    }
    return j;
}

}  // namespace cs::api

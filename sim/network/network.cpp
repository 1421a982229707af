#include "network/network.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "network/accelerator.hpp"
#include "network/collectives.hpp"
#include "network/flow_solver.hpp"
#include "network/fold_check.hpp"
#include "network/kept_plans.hpp"
#include "network/link_chains.hpp"
#include "network/observed_links.hpp"
#include "network/plan_book.hpp"
#include "network/plan_calibration.hpp"
#include "network/plan_size_map.hpp"
#include "network/ready_p2p.hpp"

namespace cs::network {

using topology::Cluster;
using topology::LinkId;

namespace {

enum EventKind : std::uint32_t {
    kDone,
    kPhaseStart,
    kRecompute,
    kCompletion,
    kSetCapacity,
    kRouting,
    kGroupStart
};

using detail::kNoCommunicator, detail::LinkMaps, detail::PlanCost, detail::PlanWords,
    detail::RealLinksOnly, detail::Routes, detail::whole_bytes;

class NetworkImpl final : public Network, public Accelerator, public EventHandler {
  public:
    // `compact`: for isolated_collective_time only (one collective, no observers, no capacity
    // changes): the solver knows only the plan's links, in increasing cluster order (ties broken
    // by link number fall as in a full network), not every link of a cluster of millions (4% of a
    // 16,384-GPU run plus page faults, one such network per distinct TP/CP/EP collective).
    // `kept`: what the networks on the cluster keep for each other (accelerator.hpp); null: none,
    // and no fast path.
    NetworkImpl(Simulation& sim, const Cluster& cluster, const NetworkConfig& config,
                KeptState* kept, bool compact = false)
        : sim_(sim), cluster_(cluster), config_(config), kept_(kept), compact_(compact) {
        if (kept_ && &kept_->cluster() != &cluster_)
            throw SimulationError("network", "kept state of another cluster");
        if (!config_.algorithms) throw ConfigError("network: no collective algorithm registry");
        handler_ = sim_.add_handler(*this);
        real_links_.links = cluster_.links().size();
        base_capacity_ = KeptState::network_capacities(kept_, cluster_, config_);
        capacity_ = base_capacity_->capacity.data();
        if (!compact_ && kept_) book_.share(kept_plans(*kept_));
        if (config_.fidelity == Fidelity::Flow)
            solver_ = std::make_unique<FlowSolver>(compact_ ? std::vector<double>{}
                                                            : base_capacity_->capacity);
    }

    void set_client(TransferClient* client) override { client_ = client; }
    // An observer that only sums per link (SummingObserver) is told sums only by a network with
    // fast paths; to a network without, every observer is a plain one.
    void add_observer(NetworkObserver* observer) override {
        if (compact_) throw SimulationError("network", "a compact network takes no observers");
        SummingObserver* summing = kept_ ? dynamic_cast<SummingObserver*>(observer) : nullptr;
        // Link tallies: its shared flows counted on the solver's links, told at flush.
        const bool tallied = summing && hold_totals_ && solver_ && summing->copies_link_images() &&
                             summing->takes_link_tallies() && solver_->keep_tallies();
        real_links_.add(observer, summing, tallied);
        // The solver's rate notifications only when some observer reads them.
        observers_.clear();
        if (real_links_.wants_link_rates()) observers_.push_back(&real_links_);
    }
    Accelerator* accelerator() override { return kept_ && !compact_ ? this : nullptr; }
    SolverStats solver_stats() const override {
        if (!solver_) return {};
        return {solver_->recomputes(), solver_->rerated_flows(), solver_->checked_flows(),
                solver_->peak_flows(), solver_->link_count()};
    }

    GroupId register_group(std::vector<int> ranks) override {
        return book_.register_group(std::move(ranks));
    }
    void reuse_groups() override { book_.reuse_groups(); }

    void send(int src, int dst, Bytes size, std::uint64_t token) override {
        if (const std::uint32_t r = ready_of(src, dst); r != detail::ReadyP2ps::kNone)
            return start_ready(r, size, token);
        bool kept = false;
        const Plan& plan = book_.p2p_plan(src, dst, &kept);
        start(plan, size, token, kept);
    }

    void collective(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo,
                    std::uint64_t token) override {
        bool kept = false;
        const Plan& plan = book_.collective_plan(kind, group, size, algo, &kept);
        if (compact_ && solver_) number_compact(plan);
        start(plan, size, token, kept);
    }

    std::pair<Algorithm, Protocol> choice(CollectiveKind kind, GroupId group, Bytes size,
                                          Algorithm algo) {
        const Plan& plan = book_.collective_plan(kind, group, size, algo);
        return {plan.algorithm, plan.protocol};
    }

    bool fold(int copies, const std::vector<FoldClass>& classes, std::string& why) override {
        // (Routes that change: a flow moved would be re-added without the fold's counts.)
        why = copies < 2                           ? "nothing to fold"
              : config_.fidelity != Fidelity::Flow ? "the network is not flow-level"
              : capacity_changed_                  ? "a link capacity was changed"
              : !routings_.empty()                 ? "routes change during the run"
              : folded_ > 1                        ? "already folded"
                                                   : "";
        if (!why.empty()) return false;
        detail::FoldCheck check(copies, real_links_.links, capacity_);
        if (auto problem = check.match_classes(book_, classes); !problem.empty()) {
            why = problem;
            return false;
        }
        real_links_.maps = check.take_maps();
        folded_ = copies;
        ready_.clear();  // solver paths now repeat the shared links
        return true;
    }

    int fold_copies() const override { return folded_; }

    bool merge_link_chains() override {
        if (config_.fidelity != Fidelity::Flow || compact_ || capacity_changed_ ||
            !book_.own_routes() || !routings_.empty() || !solver_ || solver_->active_flows() > 0 ||
            !chain_of_.empty())
            return false;
        detail::LinkChains chains = detail::find_link_chains(cluster_, capacity_);
        if (chains.chain_of.empty()) return false;
        chain_of_ = std::move(chains.chain_of);
        twin_ = std::move(chains.twin);
        real_links_.longest_chain = std::max(real_links_.longest_chain, chains.longest);
        real_links_.twins = &twin_;
        ready_.clear();  // solver paths now merge the chains
        return true;
    }
    // merge_link_chains: per cluster link, the solver link it is carried on (itself, or its
    // chain's link of least capacity), and its chain as a circular list; empty without.
    std::vector<LinkId> chain_of_, twin_;
    // The solver path of a planned path: each link on its chain's solver link, a chain once (a
    // route crosses a chain's links one after another, so repeats are adjacent), and a link
    // every folded member crosses given once per member (the solver counts the flow that many
    // times on it: the members' flows there, LinkMaps::shared).
    const std::vector<LinkId>& solver_path(const std::vector<LinkId>& path) {
        merged_path_.clear();
        LinkId previous = LinkMaps::kNone;
        for (LinkId l : path) {
            const LinkId s = l < chain_of_.size() ? chain_of_[l] : l;
            if (s == previous) continue;
            previous = s;
            const auto times =
                real_links_.maps.is_shared(l) ? static_cast<std::size_t>(folded_) : 1;
            merged_path_.insert(merged_path_.end(), times, s);
        }
        return merged_path_;
    }
    // Whether solver paths differ from planned ones (solver_path).
    bool merged_paths() const { return !chain_of_.empty() || !real_links_.maps.shared.empty(); }
    std::vector<LinkId> merged_path_;  // scratch of solver_path

    RouteCost p2p_cost(int src, int dst) override {
        const Plan& plan = book_.p2p_plan(src, dst);
        RouteCost cost;
        if (config_.fidelity == Fidelity::Ideal || plan.phases.empty()) return cost;
        const Phase& p = plan.phases.front();
        cost.delay = plan.fixed_latency + calibration_.phase_delay(plan, p);
        cost.rate = flow_rate(p.flows.front());
        return cost;
    }

    bool accounts_in_bulk() const override { return !real_links_.wants_flow_times(); }

    // Sends accounted without a flow (account_send, account_sends): only outside `flow`, and
    // `count` > 1 at once only for observers that do not need each flow's times.
    void check_accounted_sends(std::int64_t count) const {
        if (config_.fidelity == Fidelity::Flow)
            throw SimulationError("network", "a send accounted without its flow under `flow`",
                                  sim_.now());
        if (count < 1 || (count > 1 && !accounts_in_bulk()))
            throw SimulationError(
                "network", "sends accounted in bulk for an observer of flow times", sim_.now());
    }

    void account_send(int src, int dst, Bytes size, std::int64_t count) override {
        check_accounted_sends(count);
        if (!observed()) return;
        const Plan& plan = book_.p2p_plan(src, dst);
        const double bytes = static_cast<double>(size.value);
        for (const Phase& p : plan.phases)
            for (const FlowTemplate& f : p.flows) {
                const double fb = f.bytes_per_size * bytes;
                if (fb <= 0) continue;
                const Time t = config_.fidelity == Fidelity::Analytical
                                   ? transfer_time(fb, Bandwidth{flow_rate(f)})
                                   : Time::zero();
                // count equal flows: their bytes and stand-alone times summed (whole numbers of
                // bytes and picoseconds, so the sums are those of count separate notifications).
                real_links_.on_flow_start({sim_.now(), f.path,
                                           whole_bytes(fb) * static_cast<double>(count), false,
                                           t * count});
            }
    }

    std::shared_ptr<const SendRoutes> send_routes(
        const std::vector<std::pair<int, int>>& pairs) override {
        // Kept only on the cluster's own routes and capacities (the rates are the base ones).
        const bool keep = book_.shares_plans() && own_capacity_.empty();
        SharedPlans::CollectiveKey k;
        if (keep) {
            k.ranks.reserve(2 * pairs.size());
            for (const auto& [a, b] : pairs) {
                k.ranks.push_back(a);
                k.ranks.push_back(b);
            }
            k.words = calibration_.calibration_words(CollectiveKind::SendRecv, Protocol::Simple);
            k.words[0] = ~std::uint64_t{0};  // not a group: send routes
            k.words[1] = static_cast<std::uint64_t>(config_.fidelity);
            k.words[2] = static_cast<std::uint64_t>(config_.step_overhead.count_ps());
            if (auto it = book_.shared()->sends.find(k); it != book_.shared()->sends.end())
                return it->second;
        }
        auto r = std::make_shared<Routes>();
        r->costs.reserve(pairs.size());
        r->flows_of.reserve(pairs.size() + 1);
        for (const auto& [src, dst] : pairs) {
            r->costs.push_back(p2p_cost(src, dst));
            r->flows_of.push_back(static_cast<std::uint32_t>(r->flows.size()));
            const Plan& plan = book_.p2p_plan(src, dst);
            for (const Phase& p : plan.phases)
                for (const FlowTemplate& f : p.flows) {
                    Routes::Flow flow;
                    flow.first = static_cast<std::uint32_t>(r->path.size());
                    for (LinkId l : f.path)
                        if (l < real_links_.links) r->path.push_back(l);
                    flow.links = static_cast<std::uint32_t>(r->path.size()) - flow.first;
                    flow.bytes_per_size = f.bytes_per_size;
                    flow.rate = flow_rate(f);
                    r->flows.push_back(flow);
                }
        }
        r->flows_of.push_back(static_cast<std::uint32_t>(r->flows.size()));
        if (keep && book_.shared()->collective_bytes < SharedPlans::kMaxBytes) {
            book_.shared()->collective_bytes += r->bytes() + k.ranks.size() * sizeof(int);
            book_.shared()->sends.emplace(std::move(k), r);
        }
        return r;
    }

    void hold_link_totals() override { hold_totals_ = true; }
    void flush_link_totals() override {
        for (const auto& [cost, count] : held_)
            real_links_.tell_cost(sim_.now(), cluster_, *cost, count);
        held_.clear();
        held_of_.clear();
        if (solver_) real_links_.tell_tallies(*solver_, chain_of_);
        real_links_.tell_images();
    }
    void account_sends(const SendRoutes& routes, Bytes size, std::int64_t count) override {
        check_accounted_sends(count);
        if (!observed()) return;
        const auto& r = dynamic_cast<const Routes&>(routes);
        // As account_send, pair after pair: real_links_.on_flow_start drops the virtual links
        // (done in send_routes) and, unfolded by members (always, outside `flow`), passes the
        // flow on to its targets as it is.
        if (!real_links_.maps.empty())
            throw SimulationError("network", "sends accounted in a run folded by members",
                                  sim_.now());
        real_links_.tell_sends(sim_.now(), r, static_cast<double>(size.value), count,
                               config_.fidelity == Fidelity::Analytical);
    }

    void set_link_capacity(LinkId link, Bandwidth bandwidth) override {
        check_capacity(link, bandwidth);
        refuse_if_folded();
        capacity_changed_ = true;
        const auto& links = cluster_.links();
        const double eff = config_.link_efficiency[static_cast<int>(links[link].kind)];
        if (own_capacity_.empty()) {
            own_capacity_ = base_capacity_->capacity;
            capacity_ = own_capacity_.data();
        }
        own_capacity_[link] = bandwidth.bytes_per_s * eff;
        own_capacity_[links.size() + link] = bandwidth.bytes_per_s * config_.nvls_efficiency;
        if (!solver_) return;
        solver_->set_capacity(link, capacity_[link]);
        solver_->set_capacity(static_cast<LinkId>(links.size() + link),
                              capacity_[links.size() + link]);
        ensure_recompute();
    }

    void schedule_link_capacity(Time at, LinkId link, Bandwidth bandwidth) override {
        check_capacity(link, bandwidth);
        refuse_if_folded();
        capacity_changed_ = true;
        sim_.schedule_at(at, handler_, kSetCapacity, link,
                         std::bit_cast<std::uint64_t>(bandwidth.bytes_per_s));
    }

    void schedule_routing(Time at, const Cluster& routing) override {
        if (routing.links().size() != cluster_.links().size())
            throw SimulationError("network", "a routing cluster with other links", sim_.now());
        routings_.push_back(&routing);
        sim_.schedule_at(at, handler_, kRouting, routings_.size() - 1);
    }

    // The next event's memory asked for ahead (Simulation::hint_next): the flow a completion
    // removes, a group's ready records and first part's links, a ready message's links.
    bool wants_hints() const override { return true; }
    void prefetch(const Event& e) const override {
        std::uint32_t first = detail::ReadyP2ps::kNone;
        if (e.kind == kCompletion) {
            if (const auto f = solver_->next_finishing(); f != FlowSolver::kNoFlow)
                solver_->prefetch_flow(f);
        } else if (e.kind == kGroupStart)
            first = ready_.prefetch_group(static_cast<std::uint32_t>(e.b));
        else if (e.kind == kPhaseStart && e.b > 0)
            first = static_cast<std::uint32_t>(e.b - 1);
        if (first != detail::ReadyP2ps::kNone) solver_->prefetch(ready_[first].solver_path());
    }

    void on_event(Simulation& sim, const Event& e) override {
        switch (e.kind) {
            case kDone:
                release(static_cast<std::uint32_t>(e.a));
                break;
            case kPhaseStart:
                if (e.b == 0)
                    start_phase(static_cast<std::uint32_t>(e.a));
                else
                    start_ready_phase(static_cast<std::uint32_t>(e.a),
                                      static_cast<std::uint32_t>(e.b - 1));
                break;
            case kRecompute:
                recompute_scheduled_ = false;
                solver_->recompute(sim.now(), observers_);
                free_caps_.insert(free_caps_.end(), retired_caps_.begin(), retired_caps_.end());
                retired_caps_.clear();
                schedule_next_completion();
                break;
            case kCompletion:
                if (e.b == completion_version_) complete_flows();
                break;
            case kSetCapacity:
                set_link_capacity(static_cast<LinkId>(e.a), Bandwidth{std::bit_cast<double>(e.b)});
                break;
            case kRouting:
                change_routing(*routings_[e.a]);
                break;
            case kGroupStart:
                start_group_phase(static_cast<std::uint32_t>(e.a), static_cast<std::uint32_t>(e.b));
                break;
            default:
                throw SimulationError("network", "unknown event kind", sim.now());
        }
        flush_callbacks(sim);
    }

  private:
    using SharedPlans = detail::SharedPlans;
    // The plans `kept` keeps (made on first use); defined after KeptPlans, below.
    static std::shared_ptr<SharedPlans> kept_plans(KeptState& kept);
    bool observed() const { return !real_links_.targets.empty(); }
    // Whether an observer is told shared flows' starts and ends (not all are counted in link
    // tallies).
    bool flows_observed() const { return !real_links_.flow_targets.empty(); }

    struct Op {
        const Plan* plan = nullptr;
        double size = 0;
        std::uint64_t token = 0;
        std::uint32_t phase = 0;
        std::uint32_t outstanding = 0;
    };

    // compact_: solver links for the plan's links, in increasing cluster order, before any rate
    // cap link is added (as in a full network, where caps come after every cluster link).
    void number_compact(const Plan& plan) {
        std::vector<LinkId> used;
        for (const Phase& p : plan.phases)
            for (const FlowTemplate& f : p.flows)
                used.insert(used.end(), f.path.begin(), f.path.end());
        std::sort(used.begin(), used.end());
        used.erase(std::unique(used.begin(), used.end()), used.end());
        for (LinkId l : used) {
            if (compact_id_.count(l)) continue;
            if (solver_->link_count() != compact_id_.size())
                throw SimulationError("network", "a compact network runs one collective");
            compact_id_.emplace(l, solver_->add_link(capacity_[l]));
        }
    }

    void refuse_if_folded() const {
        if (!chain_of_.empty())
            throw SimulationError("network", "a link capacity changed after link chains merged",
                                  sim_.now());
        if (folded_ > 1)
            throw SimulationError("network",
                                  "a link capacity changed in a run folded by members; run it "
                                  "with --no-fold",
                                  sim_.now());
    }

    void check_capacity(LinkId link, Bandwidth bandwidth) const {
        if (link >= cluster_.links().size())
            throw SimulationError("network",
                                  "no link " + std::to_string(link) + " (the cluster has " +
                                      std::to_string(cluster_.links().size()) + " directed links)",
                                  sim_.now());
        if (!(bandwidth.bytes_per_s >= 0) ||
            bandwidth.bytes_per_s == std::numeric_limits<double>::infinity())
            throw SimulationError(
                "network",
                "link " + std::to_string(link) + " needs a finite capacity of at least 0",
                sim_.now());
    }

    double flow_rate(const FlowTemplate& f) const { return network::flow_rate(f, capacity_); }

    // A transfer of `bytes` on `plan` outside `flow`: its time (analytical: the fixed latency,
    // then per phase its delay and its longest flow; ideal: zero), calling each(flow, its
    // bytes, its stand-alone time) for every flow that carries bytes. The one definition of
    // start()'s time, run flow by flow or once for a kept cost (kept_cost).
    template <typename Each>
    Time unshared_time(const Plan& plan, double bytes, Each&& each) const {
        const bool analytical = config_.fidelity == Fidelity::Analytical;
        Time total = analytical && !plan.phases.empty() ? plan.fixed_latency : Time::zero();
        // A collective's flows mostly carry equal bytes at equal rates: the last time is reused
        // for the same arguments (transfer_time is a function of them).
        double last_fb = -1, last_rate = -1;
        Time last_t = Time::zero();
        for (const Phase& p : plan.phases) {
            Time longest = Time::zero();
            for (const FlowTemplate& f : p.flows) {
                const double fb = f.bytes_per_size * bytes;
                if (fb <= 0) continue;
                Time t = Time::zero();  // ideal: free, even at 0
                if (analytical) {
                    const double rate = flow_rate(f);
                    if (fb != last_fb || rate != last_rate) {
                        last_fb = fb;
                        last_rate = rate;
                        last_t = transfer_time(fb, Bandwidth{rate});
                    }
                    t = last_t;
                    longest = std::max(longest, t);
                }
                each(f, fb, t);
            }
            if (analytical) total += calibration_.phase_delay(plan, p) + longest;
        }
        return total;
    }

    // Whether the observers may be told a transfer's per-link sums (NetworkObserver::
    // on_link_totals): none wants flow times, and no member folding repeats each flow.
    bool takes_link_totals() const { return accounts_in_bulk() && real_links_.maps.empty(); }

    // What a transfer of `size` on a kept plan costs outside `flow` (start's loop below, done
    // once): its time and its flows' whole bytes and holding times summed per real link, in
    // increasing link order. Kept with the cluster's plans, keyed by the plan (kept plans are
    // never erased), the size and what the times are a function of besides (fidelity, step
    // overhead, the efficiencies behind the capacities); null once the kept plans are full.
    const PlanCost* kept_cost(const Plan& plan, Bytes size) {
        // This network's own index first: its configuration is fixed, so (plan, size) is the key.
        // A null entry remembers that the kept costs were full when the key was first asked for
        // (they only grow), so that the shared table is not searched again for it.
        const auto [cost, fresh] = cost_of_.try_emplace(&plan, size.value);
        if (fresh) *cost = shared_cost(plan, size);
        return *cost;
    }
    const PlanCost* shared_cost(const Plan& plan, Bytes size) {
        SharedPlans& shared = *book_.shared();
        SharedPlans::CostKey k{&plan,
                               size.value,
                               static_cast<std::uint64_t>(config_.fidelity),
                               config_.step_overhead.count_ps(),
                               {}};
        for (int l = 0; l < kLinkKinds; ++l)
            k.efficiency[static_cast<std::size_t>(l)] =
                std::bit_cast<std::uint64_t>(config_.link_efficiency[l]);
        k.efficiency[kLinkKinds] = std::bit_cast<std::uint64_t>(config_.nvls_efficiency);
        if (auto it = shared.costs.find(k); it != shared.costs.end()) return &it->second;
        if (shared.collective_bytes >= SharedPlans::kMaxBytes) return nullptr;
        PlanCost cost;
        auto& sums = shared.link_sums;
        if (sums.size() < real_links_.links) sums.resize(real_links_.links);
        std::vector<LinkId> touched;
        cost.time = unshared_time(plan, static_cast<double>(size.value),
                                  [&](const FlowTemplate& f, double fb, Time t) {
                                      const double whole = whole_bytes(fb);
                                      for (LinkId l : f.path) {
                                          if (l >= real_links_.links) continue;
                                          auto& sum = sums[l];
                                          if (sum.bytes == 0) touched.push_back(l);
                                          sum.bytes += whole;
                                          sum.holds += t;
                                      }
                                  });
        std::sort(touched.begin(), touched.end());
        cost.links.reserve(touched.size());
        for (LinkId l : touched) {
            cost.links.push_back({l, sums[l].bytes, sums[l].holds});
            sums[l] = {};
        }
        shared.collective_bytes += sizeof(SharedPlans::CostKey) + sizeof(PlanCost) + 64 +
                                   cost.links.size() * sizeof(SummingObserver::LinkTotal);
        return &shared.costs.emplace(k, std::move(cost)).first->second;
    }

    // The ready record of src -> dst (both GPUs checked), made on first use; kNone when the pair
    // has none or the network keeps none (no solver, compact, routes not the cluster's own).
    std::uint32_t ready_of(int src, int dst) {
        if (!solver_ || compact_ || !book_.own_routes()) return detail::ReadyP2ps::kNone;
        book_.check_gpu(src);
        book_.check_gpu(dst);
        const std::uint32_t r = ready_.find(src, dst);
        return r == detail::ReadyP2ps::kUnknown ? make_ready(src, dst) : r;
    }

    // `plan` null: a ready message (start_ready).
    std::uint32_t allocate(const Plan* plan, Bytes size, std::uint64_t token) {
        std::uint32_t id;
        if (!free_ops_.empty()) {
            id = free_ops_.back();
            free_ops_.pop_back();
        } else {
            id = static_cast<std::uint32_t>(ops_.size());
            ops_.emplace_back();
        }
        ops_[id] = Op{plan, static_cast<double>(size.value), token, 0, 0};
        return id;
    }

    // `kept`: the plan is kept with the cluster (SharedPlans), so what a size costs on it may be
    // kept too (kept_cost).
    void start(const Plan& plan, Bytes size, std::uint64_t token, bool kept = false) {
        if (size.value < 0)
            throw SimulationError("network", "a transfer of negative size", sim_.now());
        const std::uint32_t op = allocate(&plan, size, token);
        if (config_.fidelity == Fidelity::Flow && !plan.phases.empty()) {
            sim_.schedule_in(
                plan.fixed_latency + calibration_.phase_delay(plan, plan.phases.front()), handler_,
                kPhaseStart, op);
            return;
        }
        // Even a zero-cost transfer completes through an event, never inside send().
        sim_.schedule_in(unshared_start(plan, size, kept), handler_, kDone, op);
    }

    int send_together(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                      std::uint64_t token) override {
        if (config_.fidelity == Fidelity::Flow || srcs.empty()) {
            if (start_group(srcs, dsts, size, token)) return 1;
            for (std::size_t i = 0; i < srcs.size(); ++i)  // each part on its own
                send(srcs[i], dsts[i], size, token);
            return static_cast<int>(srcs.size());
        }
        if (size.value < 0)
            throw SimulationError("network", "a transfer of negative size", sim_.now());
        // Nothing observing and the capacities the cluster's: each part's time is a function
        // of its plan and size alone, and so the message's of its parts (until routes change).
        // Kept once worked out (a part to a GPU that does not exist throws first).
        const bool pure = own_capacity_.empty() && !observed();
        if (pure)
            if (const GroupSend* found = group_sends_.find(srcs, dsts, size.value)) {
                sim_.schedule_in(found->time, handler_, kDone, allocate(found->plan, size, token));
                return 1;
            }
        Time last = Time::zero();
        const Plan* plan = nullptr;
        for (std::size_t i = 0; i < srcs.size(); ++i) {
            bool kept = false;
            plan = &book_.p2p_plan(srcs[i], dsts[i], &kept);
            last = std::max(last, unshared_start(*plan, size, kept));
        }
        if (pure) *group_sends_.try_emplace(srcs, dsts, size.value).first = GroupSend{last, plan};
        sim_.schedule_in(last, handler_, kDone, allocate(plan, size, token));
        return 1;
    }

    // Outside `flow`: tells the observers of a transfer of `size` on `plan` started now and
    // returns its time. A transfer's time and its flows' per-link sums are functions of the
    // plan, the size and the capacities: a sweep's later runs on a shape take them as they are
    // (kept_cost) instead of walking every flow of every DP ring again.
    Time unshared_start(const Plan& plan, Bytes size, bool kept) {
        if (own_capacity_.empty() && (!observed() || takes_link_totals())) {
            if (const PlanCost* cost = kept ? kept_cost(plan, size) : nullptr) {
                if (observed() && !cost->links.empty()) {
                    if (hold_totals_) {
                        const auto [at, fresh] = held_of_.try_emplace(cost, held_.size());
                        if (fresh) held_.push_back({cost, 0});
                        ++held_[at->second].second;
                    } else {
                        real_links_.tell_cost(sim_.now(), cluster_, *cost, 1);
                    }
                }
                return cost->time;
            }
            if (!observed()) {
                // A plan not kept with the cluster, or kept costs full: this network keeps the
                // times it works out itself (plans are never freed while it lives: routes
                // changed retire them, so their addresses are not reused).
                const auto [time, fresh] = own_time_of_.try_emplace(&plan, size.value);
                if (fresh)
                    *time = unshared_time(plan, static_cast<double>(size.value),
                                          [](const FlowTemplate&, double, Time) {});
                return *time;
            }
        }
        return unshared_time(
            plan, static_cast<double>(size.value),
            [this](const FlowTemplate& f, double fb, Time t) {
                if (observed())
                    real_links_.on_flow_start({sim_.now(), f.path, whole_bytes(fb), false, t});
            });
    }

    void start_phase(std::uint32_t id) {
        const Op& op = ops_[id];
        for (const FlowTemplate& planned : op.plan->phases[op.phase].flows)
            start_flow(id, planned);
        if (ops_[id].outstanding == 0) advance(id);
        ensure_recompute();
    }

    // A point-to-point message on the fast path (detail::ReadyP2ps): its op has no plan, its
    // kPhaseStart event carries its record.
    std::uint32_t make_ready(int src, int dst) {
        const Plan& plan = book_.p2p_plan(src, dst);
        detail::ReadyP2p ready;
        bool made = false;
        if (plan.phases.size() == 1 && plan.phases[0].flows.size() == 1) {
            const FlowTemplate& f = plan.phases[0].flows[0];
            const auto& path = merged_paths() ? solver_path(f.path) : f.path;
            if (f.bytes_per_size == 1.0 && f.rate_cap == 0 && !path.empty() &&
                path.size() <= detail::ReadyP2p::kMaxHops) {
                ready.delay = plan.fixed_latency + calibration_.phase_delay(plan, plan.phases[0]);
                ready.flow = &f;
                ready.hops = static_cast<std::uint32_t>(path.size());
                std::copy(path.begin(), path.end(), ready.path);
                made = true;
            }
        }
        return ready_.remember(src, dst, made ? &ready : nullptr, cluster_.gpu_count());
    }
    void start_ready(std::uint32_t ready, Bytes size, std::uint64_t token) {
        if (size.value < 0)
            throw SimulationError("network", "a transfer of negative size", sim_.now());
        const detail::ReadyP2p& r = ready_[ready];
        solver_->prefetch(r.solver_path());
        sim_.schedule_in(r.delay, handler_, kPhaseStart, allocate(nullptr, size, token),
                         std::uint64_t{ready} + 1);
    }
    void start_ready_phase(std::uint32_t id, std::uint32_t ready) {
        add_ready(id, ready);
        if (ops_[id].outstanding == 0) advance(id);
        ensure_recompute();
    }
    void add_ready(std::uint32_t id, std::uint32_t ready) {
        const detail::ReadyP2p& r = ready_[ready];
        const double bytes = ops_[id].size;
        if (!ready_.current(r))  // routes, chains or the fold changed since: as any plan's flow
            start_flow(id, *r.flow);
        else if (bytes > 0)
            add_uncapped(id, *r.flow, r.solver_path(), bytes);
    }
    // Under `flow`, a message whose parts are all on the fast path with one delay: one op and one
    // event that starts their flows in part order at one instant, as one event per part would
    // (their places in the queue are consecutive); the client told once, when the last one ends.
    bool start_group(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                     std::uint64_t token) {
        if (srcs.size() < 2) return false;
        auto& parts = ready_.begin_group();
        for (std::size_t i = 0; i < srcs.size(); ++i) {
            const std::uint32_t r = ready_of(srcs[i], dsts[i]);
            if (r == detail::ReadyP2ps::kNone ||
                (!parts.empty() && ready_[r].delay != ready_[parts[0]].delay))
                return false;
            parts.push_back(r);
        }
        if (size.value < 0)
            throw SimulationError("network", "a transfer of negative size", sim_.now());
        const Time delay = ready_[parts[0]].delay;  // read before keep_group() takes `parts`
        sim_.schedule_in(delay, handler_, kGroupStart, allocate(nullptr, size, token),
                         ready_.keep_group());
        return true;
    }
    void start_group_phase(std::uint32_t id, std::uint32_t g) {
        const auto& parts = ready_.group(g);
        // add() waits on a part's link records (far apart): the next part's are asked for first.
        for (std::size_t i = 0; i < parts.size(); ++i) {
            if (i + 1 < parts.size()) solver_->prefetch(ready_[parts[i + 1]].solver_path());
            add_ready(id, parts[i]);
        }
        ready_.close_group(g);
        if (ops_[id].outstanding == 0) advance(id);
        ensure_recompute();
    }

    // Adds the flow of `planned` for op `id` (none without bytes).
    void start_flow(std::uint32_t id, const FlowTemplate& planned) {
        Op& op = ops_[id];
        const double bytes = planned.bytes_per_size * op.size;
        if (bytes <= 0) return;
        // A plan made before links failed: the flow takes a route around them.
        const FlowTemplate& f =
            book_.crosses_failed(planned.path) ? book_.detour(planned) : planned;
        if (f.rate_cap > 0) {
            // The flow's own rate limit: a link of its own with that capacity.
            LinkId cap;
            if (free_caps_.empty()) {
                cap = solver_->add_link(f.rate_cap);
            } else {
                cap = free_caps_.back();
                free_caps_.pop_back();
                solver_->set_capacity(cap, f.rate_cap);
            }
            if (!merged_paths()) {
                capped_path_.assign(f.path.begin(), f.path.end());
            } else {
                const auto& merged = solver_path(f.path);
                capped_path_.assign(merged.begin(), merged.end());
            }
            if (compact_)
                for (LinkId& l : capped_path_)
                    l = compact_id_.at(l);
            capped_path_.push_back(cap);
            const auto flow =
                solver_->add(capped_path_, bytes, id, sim_.now(), tallied_bytes(bytes));
            if (flow >= cap_of_flow_.size()) cap_of_flow_.resize(flow + 1, kNoCap);
            cap_of_flow_[flow] = cap;
            note_start(flow, f, bytes);
            ++op.outstanding;
            return;
        }
        if (compact_) {
            capped_path_.clear();
            for (LinkId l : f.path)
                capped_path_.push_back(compact_id_.at(l));
        }
        add_uncapped(id, f,
                     compact_          ? capped_path_
                     : !merged_paths() ? f.path
                                       : solver_path(f.path),
                     bytes);
    }
    // Adds op `id`'s flow of `bytes`, template `f`, on the solver links `path` (no rate cap).
    void add_uncapped(std::uint32_t id, const FlowTemplate& f, std::span<const LinkId> path,
                      double bytes) {
        const auto flow = solver_->add(path, bytes, id, sim_.now(), tallied_bytes(bytes));
        if (flow < cap_of_flow_.size()) cap_of_flow_[flow] = kNoCap;
        note_start(flow, f, bytes);
        ++ops_[id].outstanding;
    }

    // Every solver flow's template is kept: its GPUs should a failed link move it, and the path
    // observers were told of, for its end.
    void note_start(FlowSolver::FlowId flow, const FlowTemplate& f, double bytes) {
        if (flow >= flow_template_.size()) flow_template_.resize(flow + 1, nullptr);
        flow_template_[flow] = &f;
        if (!flows_observed()) {
            if (folded_ > 1) real_links_.check_folded(f.path);  // a flow outside the fold throws
            return;
        }
        real_links_.on_flow_start({sim_.now(), f.path, whole_bytes(bytes), true, Time::zero()});
    }

    // The bytes a flow of `bytes` adds to link tallies: those observers are told of it.
    double tallied_bytes(double bytes) const {
        return solver_->keeps_tallies() ? whole_bytes(bytes) : 0;
    }

    void advance(std::uint32_t id) {
        Op& op = ops_[id];
        if (op.plan && ++op.phase < op.plan->phases.size()) {
            sim_.schedule_in(calibration_.phase_delay(*op.plan, op.plan->phases[op.phase]),
                             handler_, kPhaseStart, id);
            return;
        }
        release(id);
    }

    void release(std::uint32_t id) {
        done_tokens_.push_back(ops_[id].token);
        free_ops_.push_back(id);
    }

    void complete_flows() {
        scheduled_completion_ = Time::max();
        const Time now = sim_.now();
        for (;;) {
            const auto f = solver_->next_finishing();
            if (f == FlowSolver::kNoFlow || solver_->finish_time(f) > now) break;
            const std::uint32_t id = solver_->owner(f);
            solver_->remove(f, now);
            if (flows_observed()) real_links_.on_flow_end(now, observed_path(f));
            if (f < cap_of_flow_.size() && cap_of_flow_[f] != kNoCap) {
                // Reusable once the solver has re-solved without the flow.
                retired_caps_.push_back(cap_of_flow_[f]);
                cap_of_flow_[f] = kNoCap;
            }
            if (--ops_[id].outstanding == 0) advance(id);
        }
        ensure_recompute();
        if (!solver_->dirty()) schedule_next_completion();
    }

    // The links of flow f as observers were told when it started.
    const std::vector<LinkId>& observed_path(FlowSolver::FlowId f) const {
        return flow_template_[f]->path;
    }

    // Makes `routing` the network's routes (schedule_routing): plans cached so far stay alive for
    // the operations using them but are no longer found; flows in flight over failed links move.
    void change_routing(const Cluster& routing) {
        if (!chain_of_.empty())
            throw SimulationError("network", "routes changed after link chains merged", sim_.now());
        book_.change_routing(routing);
        group_sends_.clear();  // their plans were the old routes'
        ready_.clear();
        if (!solver_) return;
        const Time now = sim_.now();
        std::vector<FlowSolver::FlowId> moving;
        for (LinkId l = 0; l < cluster_.links().size(); ++l)
            if (book_.routing().link_failed(l))
                for (FlowSolver::FlowId f : solver_->flows_on(l))
                    moving.push_back(f);
        std::sort(moving.begin(), moving.end());
        moving.erase(std::unique(moving.begin(), moving.end()), moving.end());
        for (FlowSolver::FlowId f : moving) {
            const double left = solver_->remaining(f, now);
            if (left <= 0) continue;  // its last byte arrives now
            // The flow's template gives its GPUs; its path in the solver may end in its rate cap.
            const FlowTemplate* planned = flow_template_[f];
            const FlowTemplate& moved = book_.detour(*planned);
            const std::uint32_t owner = solver_->owner(f);
            const LinkId cap = f < cap_of_flow_.size() ? cap_of_flow_[f] : kNoCap;
            solver_->remove(f, now);
            if (flows_observed()) real_links_.on_flow_end(now, observed_path(f));
            capped_path_.assign(moved.path.begin(), moved.path.end());
            if (cap != kNoCap) capped_path_.push_back(cap);
            const auto g = solver_->add(capped_path_, left, owner, now, tallied_bytes(left));
            if (g != f && f < cap_of_flow_.size()) cap_of_flow_[f] = kNoCap;
            if (g >= cap_of_flow_.size()) cap_of_flow_.resize(g + 1, kNoCap);
            cap_of_flow_[g] = cap;
            note_start(g, moved, left);
        }
        ensure_recompute();
    }

    void ensure_recompute() {
        if (recompute_scheduled_ || !solver_->dirty()) return;
        recompute_scheduled_ = true;
        sim_.schedule_in(Time::zero(), handler_, kRecompute);
    }

    void schedule_next_completion() {
        const auto f = solver_->next_finishing();
        if (f == FlowSolver::kNoFlow) return;
        const Time t = solver_->finish_time(f);
        if (t == Time::max()) return;  // only stalled flows (links without capacity) are left
        if (t == scheduled_completion_) return;
        scheduled_completion_ = t;
        sim_.schedule_at(t, handler_, kCompletion, 0, ++completion_version_);
    }

    void flush_callbacks(Simulation& sim) {
        if (done_tokens_.empty()) return;
        // Same-time completions are reported in token order, whatever order they finished in.
        std::sort(done_tokens_.begin(), done_tokens_.end());
        callback_batch_.swap(done_tokens_);
        done_tokens_.clear();
        if (client_)
            for (std::uint64_t token : callback_batch_)
                client_->on_transfer_done(sim, token);
        callback_batch_.clear();
    }

    Simulation& sim_;
    const Cluster& cluster_;
    NetworkConfig config_;
    detail::PlanCalibration calibration_{cluster_, config_};
    detail::PlanBook book_{sim_, cluster_, config_, calibration_};
    HandlerId handler_ = 0;
    TransferClient* client_ = nullptr;
    std::vector<NetworkObserver*> observers_;
    // Current capacity per solver link (real then NVLS virtual): the cluster's kept ones
    // (base_capacity_) until set_link_capacity changes one, then a copy of this network's own.
    std::shared_ptr<const KeptState::ScaledCapacities> base_capacity_;
    std::vector<double> own_capacity_;
    const double* capacity_ = nullptr;
    KeptState* kept_ = nullptr;  // null: no fast path
    // kept_cost's index of this network's lookups, by (plan, size).
    detail::PlanSizeMap<const PlanCost*> cost_of_;
    // unshared_start's times of transfers whose cost the kept costs had no room for, by (plan,
    // size), when nothing observes the network.
    detail::PlanSizeMap<Time> own_time_of_;
    // send_together's messages, when nothing observes the network and no capacity is its own:
    // their time and their last part's plan (the one its completion is allocated with).
    struct GroupSend {
        Time time;
        const Plan* plan = nullptr;
    };
    detail::GroupSendMap<GroupSend> group_sends_;
    // hold_link_totals: the kept costs told at flush_link_totals, in first-use order, with the
    // transfers each stands for.
    bool hold_totals_ = false;
    std::vector<std::pair<const PlanCost*, std::int64_t>> held_;
    std::unordered_map<const PlanCost*, std::size_t> held_of_;
    std::vector<Op> ops_;
    std::vector<std::uint32_t> free_ops_;
    std::unique_ptr<FlowSolver> solver_;
    // Per-flow rate caps (FlowTemplate::rate_cap) as private solver links, pooled.
    static constexpr LinkId kNoCap = ~LinkId{0};
    std::vector<LinkId> cap_of_flow_;  // by solver flow id
    std::vector<LinkId> free_caps_;
    std::vector<LinkId> retired_caps_;
    std::vector<LinkId> capped_path_;
    // Routes (schedule_routing): those scheduled (the plans made under earlier ones and the
    // templates of flows moved around failed links live in the book: operations in flight still
    // point into them), and each solver flow's template (by solver flow id).
    std::vector<const Cluster*> routings_;
    std::vector<const FlowTemplate*> flow_template_;
    RealLinksOnly real_links_;
    detail::ReadyP2ps ready_;  // point-to-point messages' fast path
    std::vector<std::uint64_t> done_tokens_;
    std::vector<std::uint64_t> callback_batch_;
    bool recompute_scheduled_ = false;
    bool compact_ = false;
    std::unordered_map<LinkId, LinkId> compact_id_;  // compact_: cluster link -> solver link
    bool capacity_changed_ = false;  // set_link_capacity or schedule_link_capacity was called
    int folded_ = 1;                 // fold(): members each transfer stands for
    Time scheduled_completion_ = Time::max();
    std::uint64_t completion_version_ = 0;
};

}  // namespace

// The plans a KeptState keeps for the networks on its cluster.
struct KeptPlans final : detail::SharedPlans {};

namespace {
std::shared_ptr<NetworkImpl::SharedPlans> NetworkImpl::kept_plans(KeptState& kept) {
    auto& slot = kept.plans();
    if (!slot) slot = std::make_shared<KeptPlans>();
    return slot;
}
}  // namespace

std::unique_ptr<Network> make_network(Simulation& sim, const Cluster& cluster,
                                      const NetworkConfig& config, KeptState* kept) {
    return std::make_unique<NetworkImpl>(sim, cluster, config, kept);
}

Time isolated_collective_time(const Cluster& cluster, const NetworkConfig& config,
                              CollectiveKind kind, const std::vector<int>& ranks, Bytes size,
                              Algorithm algorithm, KeptState* kept) {
    struct Done final : TransferClient {
        Time at = Time::max();
        void on_transfer_done(Simulation& sim, std::uint64_t) override { at = sim.now(); }
    };
    Simulation sim;
    auto net = std::make_unique<NetworkImpl>(sim, cluster, config, kept, /*compact=*/true);
    Done done;
    net->set_client(&done);
    net->collective(kind, net->register_group(ranks), size, algorithm, 0);
    sim.run();
    if (done.at == Time::max())
        throw SimulationError("network", "an isolated collective never completed", sim.now());
    return done.at;
}

std::pair<Algorithm, Protocol> collective_choice(const Cluster& cluster,
                                                 const NetworkConfig& config, CollectiveKind kind,
                                                 const std::vector<int>& ranks, Bytes size,
                                                 Algorithm algorithm) {
    Simulation sim;
    NetworkImpl net(sim, cluster, config, /*kept=*/nullptr, /*compact=*/true);
    return net.choice(kind, net.register_group(ranks), size, algorithm);
}

}  // namespace cs::network

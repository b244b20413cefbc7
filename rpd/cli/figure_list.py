"""Every figure the figure script makes, in the paper's order, with the message its numbers should
show (``python -m experiments.reproduce_paper_figures`` prints them beside the measured numbers)."""

# docs/science.md#the-papers-experiments, in the paper's order: figure -> the message the numbers should show.
FIGURES = {
    "e1_pd_vs_rpd": "E1: at delta = S^2 - S/2 = 60, RPD tracks PD (random quadratic, S = 8)",
    "e2_delay_law": "E2: PD's steady-state delays: max ~ S^2 - S/2, mean ~ S^2/2",
    "e3_nesterov": "E3: PD beats LocalSGD (H = 2, 5, 30) clearly on Nesterov's quadratic",
    "e4_logistic": "E4: LocalSGD with H = 5 beats PD on logistic regression; H = 30 is worst",
    "e5_nanochat": "E5: PD reaches a clearly lower training loss than LocalSGD on the small LM",
    "e6_scaling": "E6: at fixed time PD/RPD stay flat near 1e-2, LocalSGD improves with S, wins for S >= 4",
    "e7_schedules": "E7: schedule pictures: PD 1F1B, naive (NOAM = 1), LocalSGD H = 1, 2, 3",
    "e8_delta": "E8: best RPD objective against delta (PD's level for reference)",
    "staleness_scaling": "S^4: measured stale-read error exponents next to the bound's 4",
    "e9_frontier": "E9: every schedule's bubble and memory, measured; the seeds' four claims checked",
    "e10_frontier": "E10: every schedule trained: loss at a time budget and time to a target, against memory",
    "e11_costs": (
        "E11: E3 and E6 under costs (tB = 2tF, p2p c, averaging alpha + beta*D): the averaging "
        "latency alpha at which the winner changes, per S and c (claims below, measured)"
    ),
    "e12_optimizers": (
        "E12: does the paper's ranking hold per optimizer? PD, RPD, LocalSGD / DiLoCo, 2BW, GPipe, 1F1B "
        "under SGD, momentum, Adam, Muon at equal simulated time, gamma tuned per cell (verdicts measured)"
    ),
    "e13_optim_staleness": (
        "E13: staleness under momentum and Adam: slowdown in updates to target vs S = 1 and the "
        "||x - z||^2 local slopes, with and without the correction arms (measured, either way)"
    ),
    "e14_search": (
        "E14: searched schedules against hand-written ones: makespan against the activation cap; "
        "exact optimum proven, gain over the best hand-written that fits (unit, latency, imbalanced)"
    ),
    "e15_workers": (
        "E15: n workers as pure DP, pure PP, even S x D and PipeDream's partitioner (1F1B-RR): tokens/s "
        "and memory per device; pipeline inside a node, the partitioner's depth, stashing at 10x (verdicts)"
    ),
    "e16_survey": (
        "E16: the pipeline survey's table measured: every system's bubble, memory, extra work and loss at "
        "equal simulated time, each qualitative statement with a verdict (AvgPipe, WPipe: reconstructions)"
    ),
    "e17_staleness_2026": (
        "E17: the 2025-2026 staleness results at rpd's scale: AdamW vs Muon under 2BW with error feedback, "
        "Nesterov's look-ahead at S = 8, Adam's slowdown vs S plain and rotated (3 seeds, verdicts measured)"
    ),
    "e18_scale": (
        "E18: the staleness cost against model size: kappa (tokens to the synchronous loss at D, over D) of PD, 2BW, "
        "PipeMare, nesterov_async, LocalSGD and DiLoCo on the char LM at 3 sizes, fitted kappa - 1 = c N^gamma"
    ),
    "e18_width": (
        "E18 at fixed depth, wider: kappa of PD, 2BW (M = 4) and PipeMare under AdamW on the char LM at S = 4 "
        "(widths 24-128, x22 in N) and S = 6 at width 24, fitted kappa - 1 = c N^gamma per S"
    ),
    "e19_stragglers": (
        "E19: stragglers and jitter: step time and time to a target loss of the synchronous flushes, the "
        "zero-bubble family, the asynchronous streams and LocalSGD as one straggler's factor and the jitter grow"
    ),
    "plan_claims": (
        "The seeds' memory, communication and efficiency claims on GPT-3 1.3B's stages: "
        "activations M vs min(S - s, M), p2p 2hsM, efficiency 60-80 %, 16 stages (verdicts measured)"
    ),
    "plan_accuracy": (
        "The plan held against published runs: Megatron-LM's SC'21 Table 1 (A100) and its H100 table, "
        "predicted against published throughput per row, one fitted parameter pair per hardware preset"
    ),
}

# Each quick figure's cold cost: user + system CPU seconds of `python -m experiments.figure
# experiment=<name>` alone, with an empty JAX cache, numba cache and store and one thread
# (RPD_WORKERS=1), measured one by one at d11d7a5 on the 2-core machine shared with other
# sessions (load 6-12; BENCHMARKS.md, "Quick figures, cold, one by one"): CPU seconds move less
# with the load than wall time. The figure script queues its figures and the spread figures'
# units longest first (rpd.cli.spread.longest_first); a unit costs its "<figure>/<unit key>"
# entry, else its figure's cost over its units (E10's quick preset is one unit now; with the
# four objectives its 279.5 s were nanochat 120.4, mlp_chain 66.6, logistic 48.7, nesterov 43.8).
# E10, E12, E18, E18 width and E5 remeasured the same way (user + system CPU, one by one, empty JAX,
# numba and rpd caches) after their quick presets shrank, on branch quickA from 174575b, load 5-8:
# E10 the quadratic alone (18 programs, the flushes in 2BW's), E12 without the LM (19), E18 PD only (2), both E18s'
# references in PD's program (E18 width: 2), E5 N = 128 at H = 4 (4).
# Entries marked "remeasured" were measured again the same way (user + system, NUMBA_CACHE_DIR
# empty too) on 174575b (the second shrinking of the quick presets): E11, E6, S⁴ and E4 with their smaller
# quick presets (load 5-7; the same figures at 174575b at those loads: E11 81.8, E6 50.9, S⁴
# 45.2, E4 23.8); plan_accuracy with the memoised orders and the vectorised overlap lookups (load
# 3.6; 49.1 at 174575b, load 3); E9, E7, E14, E15, plan_claims, E19 and E16, whose schedules the
# memoised orders build, at load 1-3 (at 174575b, load 4-7: 37.8, 21.9, 16.3, 13.3, 11.9, 19.9,
# 29.8: mostly the load's difference). The d11d7a5 entries were measured at load 6-12.
# "quickC": E17 (an optimizer's sync and 2BW arms, its PD and sync arms, one program each: 25 -> 19
# programs) and E11 (α = 0, 16, 256 and E3's H = 2, 30: 31 -> 23) remeasured the same way on branch
# quickC from e784592, load 2-3 (at e784592, same session and load: E17 71.8, E11 61.4).
COLD_CPU_S = {
    "e10_frontier": 37.0,
    "e10_frontier/nesterov_quadratic/S4": 37.0,
    "e12_optimizers": 42.3,
    "e18_scale": 30.3,
    "e18_width": 36.9,
    "e11_costs": 50.1,  # remeasured (quickC, above)
    "e17_staleness_2026": 54.1,  # remeasured (quickC, above)
    "e5_nanochat": 42.3,
    "plan_accuracy": 28.9,  # remeasured (above)
    "e6_scaling": 38.1,  # remeasured (above)
    "staleness_scaling": 32.0,  # remeasured (above)
    "e9_frontier": 30.9,  # remeasured (above)
    "e16_survey": 26.6,  # remeasured (above)
    "e13_optim_staleness": 32.2,
    "e4_logistic": 18.5,  # remeasured (above)
    "e7_schedules": 20.0,  # remeasured (above)
    "e19_stragglers": 20.0,  # remeasured (above)
    "e14_search": 15.0,  # remeasured (above)
    "e1_pd_vs_rpd": 16.7,
    "e15_workers": 13.0,  # remeasured (above)
    "plan_claims": 12.4,  # remeasured (above)
    "e3_nesterov": 14.5,
    "e8_delta": 13.0,
    "e2_delay_law": 9.7,
}

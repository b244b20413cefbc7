"""The plan's development set: published Megatron and NeMo runs, each with the settings its
source ran (docs/plan.md#accuracy; SPEC-quoted numbers, never fitted per row).

Five sources, each a list of :class:`Run`:

* ``sc21``: Megatron-LM's SC'21 paper, Table 1 (Narayanan et al. 2021), GPT 1.7B to 1T on DGX
  A100 (``a100_80g``), sequence 2048, vocabulary 51,200, fp16, full recomputation, standard
  attention, TP without SP, fp16 gradients all-reduced (no distributed optimizer): by torch DDP
  overlapped with the last microbatch's backward in the four rows without a pipeline
  (``--DDP-impl torch`` in ``run_table_1.sh``; Megatron's 2021 ``schedules.py`` runs the other
  microbatches under ``no_sync``), after the flush by Megatron's local DDP in the rest; blocking
  p2p (the 2021 code had no overlap); the published TFLOP/s per GPU counts
  the recomputation, 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration.
* ``megatron_h100``: Megatron-LM's H100 table (DGX H100, ``h100_80g``), sequence 4096,
  vocabulary 131,072, bf16, DP 48, micro-batch 1 (the source leaves it open), flash attention,
  SP, the distributed optimizer with fp32 gradients (Megatron reduces them in fp32 under bf16),
  TP, gradient and parameter overlaps on, 1F1B (p2p blocking: Megatron's flag is for the
  interleaved schedule); published TFLOP/s per GPU (the table's MFU column is its rounding over
  989), counting 72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)) per iteration.
* ``nemo_gpt3_175b``, ``nemo_nemotron4_340b``, ``nemo_nemotron4_15b``: NVIDIA's NeMo 24.11
  DGX-H100 BF16 runs (``NVIDIA/dgxc-benchmarking``, release 24.11.1), with the settings of the
  benchmark's own configurations, the files those runs were launched with:
  ``nemo_megatron/gpt3_175b_hydra.yaml`` and ``nemo_megatron/launch.sh``;
  ``nemotron/nemotron4-{15b,340b}-synth.yaml`` and ``nemotron/configure.sh``'s overrides.
  Common to the three: Transformer Engine, SP, TP-comm overlap (``ub_tp_comm_overlap``), the
  distributed optimizer with gradient and parameter overlaps, gradients reduced in bf16
  (``grad_sync_dtype: bf16``). 175B: no recomputation (``activations_checkpoint_granularity:
  null``), p2p overlap, Transformer Engine's flash-attention backend (``NVTE_FUSED_ATTN=0``);
  340B: selective recomputation, p2p overlap (``configure.sh``), the flash-attention backend
  (``NVTE_FUSED_ATTN=0``), the distributed optimizer's copy of the weights and its state in bf16
  (``model.optim.dtype: bf16``: precision ``bf16``, bytes only); 15B: no recomputation, cuDNN's
  fused attention (``NVTE_FUSED_ATTN=1``, the preset's rate). NeMo-Framework-Launcher's generic ``conf/training`` files differ (175B
  selective, fp32 gradient sync): the benchmark's own files are what ran.

Every run's published figure becomes a step time in seconds (the quantity the plan predicts);
``published`` keeps the source's own figure and ``unit`` names it.
"""

from __future__ import annotations

import dataclasses

from rpd.model.layers import GPTConfig
from rpd.model.overlap import Overlap
from rpd.model.search3d import Candidate
from rpd.model.shapes import PRESETS

SOURCES = {
    "sc21": ("Megatron-LM SC'21 Table 1 (DGX A100)", "a100_80g"),
    "megatron_h100": ("Megatron-LM H100 table (DGX H100)", "h100_80g"),
    "nemo_gpt3_175b": ("NeMo 24.11 GPT-3 175B (DGX H100)", "h100_80g"),
    "nemo_nemotron4_340b": ("NeMo 24.11 Nemotron-4 340B (DGX H100)", "h100_80g"),
    "nemo_nemotron4_15b": ("NeMo 24.11 Nemotron-4 15B (DGX H100)", "h100_80g"),
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One published run: its model, layout, settings and published step time."""

    source: str
    name: str
    model: GPTConfig
    TP: int
    PP: int
    DP: int
    M: int
    v: int | None
    recompute: str
    attention: str
    SP: bool
    zero: int
    grad_bytes: int
    overlap: Overlap
    step_s: float  # published, as a step time
    published: float  # the source's own figure
    unit: str  # of ``published``
    attention_efficiency: float | None = None  # the run's attention kernel, if not the preset's
    precision: str = "bf16_mixed"  # the optimizer's copy and state (rpd.model.memory): bytes only

    @property
    def preset(self) -> str:
        return SOURCES[self.source][1]

    @property
    def gpus(self) -> int:
        return self.TP * self.PP * self.DP

    @property
    def schedule(self) -> str:
        return "1f1b" if self.v is None else "interleaved"

    @property
    def layout(self) -> Candidate:
        """Its layout as the search's candidate (which times it: :meth:`Candidate.row`)."""
        return Candidate(
            self.TP,
            self.PP,
            self.DP,
            self.M,
            self.schedule,
            self.v,
            SP=self.SP,
            recompute=self.recompute,
            zero=self.zero,
        )


# name, hidden, layers, heads, TP, PP, v, micro-batch, global batch, GPUs, TFLOP/s per GPU
SC21 = (
    ("1.7B", 2304, 24, 24, 1, 1, None, 16, 512, 32, 137),
    ("3.6B", 3072, 30, 32, 2, 1, None, 16, 512, 64, 138),
    ("7.5B", 4096, 36, 32, 4, 1, None, 16, 512, 128, 142),
    ("18B", 6144, 40, 48, 8, 1, None, 8, 1024, 256, 135),
    ("39B", 8192, 48, 64, 8, 2, None, 4, 1536, 512, 138),
    ("76B", 10240, 60, 80, 8, 4, 3, 2, 1792, 1024, 140),
    ("145B", 12288, 80, 96, 8, 8, 2, 2, 2304, 1536, 148),
    ("310B", 16384, 96, 128, 8, 16, 2, 1, 2160, 1920, 155),
    ("530B", 20480, 105, 128, 8, 35, 3, 1, 2520, 2520, 163),
    ("1T", 25600, 128, 160, 8, 64, None, 1, 3072, 3072, 163),
)
# name, hidden, layers, heads, TP, PP, global batch, TFLOP/s per GPU (the table's own column, of
# which its MFU column is the rounding over 989 TFLOP/s: images/model_table.png)
H100 = (
    ("1.7B", 2048, 24, 16, 1, 1, 192, 408.8),
    ("7.1B", 4096, 30, 32, 2, 1, 192, 465.9),
    ("16B", 6144, 32, 48, 4, 1, 192, 489.1),
    ("32B", 7168, 48, 56, 8, 1, 192, 459.6),
    ("70B", 8192, 84, 64, 8, 2, 384, 419.7),
    ("119B", 10240, 92, 80, 8, 4, 768, 420.5),
    ("177B", 12288, 96, 96, 8, 6, 1152, 432.8),
    ("314B", 16384, 96, 128, 8, 8, 1536, 474.4),
    ("462B", 18432, 112, 144, 8, 16, 3072, 459.9),
)
H100_SEQ, H100_VOCAB, H100_DP = 4096, 131072, 48
# FlashAttention-2 on H100: "only 35% utilization" (Shah et al. 2024, "FlashAttention-3",
# abstract), the rate of Transformer Engine's flash-attention backend (NVTE_FUSED_ATTN=0) on H100
FLASH_ATTENTION_2_H100 = 0.35
# NeMo: (GPUs, global batch, seconds per step)
NEMO_175B = ((128, 256, 8.91), (256, 512, 8.95), (512, 1024, 9.09), (1024, 2048, 9.01), (2048, 4096, 9.02))
NEMO_340B = ((128, 32, 4.61), (256, 64, 4.67), (512, 128, 4.70), (1024, 256, 4.73), (2048, 512, 4.84))
NEMO_15B = (
    (16, 64, 2.812),
    (32, 128, 2.824),
    (64, 256, 2.845),
    (128, 512, 2.859),
    (256, 1024, 2.852),
    (512, 2048, 2.875),
    (1024, 4096, 2.895),
    (2048, 8192, 2.887),
)


def sc21_flops(cfg: GPTConfig, gbs: int) -> float:
    """SC'21's FLOPs per iteration, recomputation counted (4 passes)."""
    s, L, h, V = cfg.seq, cfg.n_layer, cfg.d_model, cfg.vocab
    return 96.0 * gbs * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def megatron_flops(cfg: GPTConfig, gbs: int) -> float:
    """Megatron's model FLOPs per iteration (Narayanan et al. 2021, Eq. 3)."""
    s, L, h, V = cfg.seq, cfg.n_layer, cfg.d_model, cfg.vocab
    return 72.0 * gbs * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))


# run_table_1.sh's --DDP-impl: "torch" for the four rows without a pipeline, "local" for the rest
SC21_TORCH_DDP = ("1.7B", "3.6B", "7.5B", "18B")


def _sc21() -> list[Run]:
    out = []
    for name, h, L, a, TP, PP, v, mbs, gbs, gpus, tflops in SC21:
        cfg = GPTConfig(n_layer=L, d_model=h, n_head=a, seq=2048, vocab=51200, micro_batch=mbs)
        DP = gpus // (TP * PP)
        step = sc21_flops(cfg, gbs) / (tflops * 1e12 * gpus)
        out.append(
            Run(
                "sc21",
                name,
                cfg,
                TP,
                PP,
                DP,
                gbs // (DP * mbs),
                v,
                "full",
                "standard",
                False,
                0,
                2,
                # torch DDP under no_sync: the last microbatch's backward launches the bucketed
                # all-reduce (Megatron 2021 megatron/schedules.py); local DDP reduces after the flush
                Overlap(p2p=False, grad_reduce=name in SC21_TORCH_DDP),
                step,
                tflops,
                "TFLOP/s per GPU",
            )  # fmt: skip
        )
    return out


def _h100() -> list[Run]:
    out = []
    for name, h, L, a, TP, PP, gbs, tflops in H100:
        cfg = GPTConfig(n_layer=L, d_model=h, n_head=a, seq=H100_SEQ, vocab=H100_VOCAB, positions="rope")
        step = megatron_flops(cfg, gbs) / (TP * PP * H100_DP * tflops * 1e12)
        ov = Overlap(tp_comm=TP > 1, p2p=False, grad_reduce=True, param_gather=True)
        out.append(
            Run(
                "megatron_h100",
                name,
                cfg,
                TP,
                PP,
                H100_DP,
                gbs // H100_DP,
                None,
                "none",
                "flash",
                TP > 1,
                1,
                4,
                ov,
                step,
                tflops,
                "TFLOP/s per GPU",
            )  # fmt: skip
        )
    return out


def _nemo(
    source, cfg, rows, TP, PP, v, mbs, recompute, p2p, attention_efficiency=None, precision="bf16_mixed"
) -> list[Run]:
    cfg = dataclasses.replace(cfg, micro_batch=mbs)
    ov = Overlap(tp_comm=True, p2p=p2p, grad_reduce=True, param_gather=True)
    out = []
    for gpus, gbs, step in rows:
        DP = gpus // (TP * PP)
        out.append(
            Run(
                source,
                f"{gpus} GPUs",
                cfg,
                TP,
                PP,
                DP,
                gbs // (DP * mbs),
                v,
                recompute,
                "flash",
                True,
                1,
                2,  # grad_sync_dtype: bf16
                ov,
                step,
                step,
                "s/step",
                attention_efficiency,
                precision,
            )  # fmt: skip
        )
    return out


def runs() -> list[Run]:
    """Every run of the development set, source by source."""
    return [
        *_sc21(),
        *_h100(),
        *_nemo("nemo_gpt3_175b", PRESETS["gpt3_175b"], NEMO_175B, 4, 8, 12, 1, "none", True, FLASH_ATTENTION_2_H100),
        *_nemo(
            "nemo_nemotron4_340b",
            PRESETS["nemotron4_340b"],
            NEMO_340B,
            8,
            8,
            12,
            1,
            "selective",
            True,
            FLASH_ATTENTION_2_H100,
            "bf16",  # model.optim.dtype: bf16
        ),
        *_nemo("nemo_nemotron4_15b", PRESETS["nemotron4_15b"], NEMO_15B, 4, 1, None, 4, "none", False),
    ]

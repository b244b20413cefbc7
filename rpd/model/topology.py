"""Where the ranks of a TP × PP × DP job sit, and which link each transfer crosses (docs/plan.md).

Ranks are numbered as Megatron numbers them, tensor parallel fastest, then context parallel,
then data parallel, then pipeline: rank = tp + TP·(cp + CP·(dp + DP·pp)), and node = rank //
gpus_per_node. So

* a TP group (TP consecutive ranks) must sit inside one node: TP divides ``gpus_per_node``
  (refused otherwise);
* a CP group (stride TP) sits inside one node while TP·CP <= gpus_per_node, its ring's
  transfers on NVLink, else on each rank's InfiniBand port (:mod:`rpd.model.compute`);
* the gradients are reduced over the DP × CP ranks that hold the same weights (stride TP),
  min(DP·CP, gpus_per_node // TP) of them in each node (at least 1); its collectives use that
  many inter-node ports when it spans nodes (:meth:`rpd.model.hardware.Hardware.collective_link`);
* stage p sends to stage p + 1 over NVLink when both sit in one node, over InfiniBand
  otherwise; the plan times every boundary by the slowest one, so p2p is inter-node as soon as
  the pipeline (S·TP·DP ranks for its every replica) spans more than one node.

With ``gpus_per_node`` 1 (the flat presets) every p2p and every collective is inter-node.

Sites (``hardware.sites`` > 1, :mod:`rpd.model.hardware`): the workers split evenly over the
sites. With D a multiple of the sites each site holds D / sites whole pipelines, so every DP
group spans the sites and its ring crosses each site link once, the TP·S groups of a pipeline
(one per rank, its DP × CP peers) all at once (``dp_site_rings``); p2p stays in a site. With
one pipeline (D = 1) whose S stages split evenly over the sites, the boundaries between the
sites' stages cross the site links, their TP × CP ranks sending at once (``p2p_site_share``;
the plan's step is at least what a cut carries over its link, :mod:`rpd.model.plan`). Any other
D is refused.
"""

from __future__ import annotations

import dataclasses

from rpd.model.hardware import Hardware
from rpd.validation import check_int


@dataclasses.dataclass(frozen=True)
class Placement:
    """TP × CP × DP × S ranks on ``hardware``'s nodes (module docstring)."""

    TP: int
    DP: int
    S: int
    gpus_per_node: int
    CP: int = 1
    sites: int = 1

    @property
    def dp_site_rings(self) -> int:
        """Rings crossing each site link at once in the DP × CP reduction (0: it stays in a site)."""
        return self.TP * self.S if self.sites > 1 and self.DP > 1 else 0

    @property
    def p2p_site_share(self) -> int:
        """Senders sharing a site link at a stage boundary that crosses it (0: none does)."""
        return self.TP * self.CP if self.sites > 1 and self.DP == 1 else 0

    @property
    def workers(self) -> int:
        return self.TP * self.CP * self.DP * self.S

    @property
    def dp_per_node(self) -> int:
        """Members of one gradient-reduction (DP × CP) group in each node it touches."""
        return max(1, min(self.DP * self.CP, self.gpus_per_node // self.TP))

    @property
    def cp_intra(self) -> bool:
        """A CP group inside one node."""
        return self.TP * self.CP <= self.gpus_per_node

    @property
    def p2p_intra(self) -> bool:
        """Every stage boundary inside one node."""
        return self.workers <= self.gpus_per_node


def place(hw: Hardware, TP: int = 1, DP: int = 1, S: int = 1, CP: int = 1) -> Placement:
    """The :class:`Placement` of a job; TP must divide ``hardware.gpus_per_node``."""
    TP, DP, S = check_int("pipeline.TP", TP), check_int("pipeline.D", DP), check_int("pipeline.S", S)
    CP = check_int("pipeline.CP", CP)
    g = hw.gpus_per_node
    if TP > 1 and (TP > g or g % TP):
        raise ValueError(f"pipeline.TP={TP} must divide hardware.gpus_per_node={g} (a TP group sits inside one node)")
    k = hw.sites
    if k > 1 and DP % k and not (DP == 1 and S % k == 0):
        raise ValueError(
            f"pipeline.D={DP} with hardware.sites={k}: D must be a multiple of the sites (whole pipelines in "
            f"each site), or 1 with pipeline.S={S} a multiple of them (one pipeline split over the sites)"
        )
    return Placement(TP=TP, DP=DP, S=S, gpus_per_node=g, CP=CP, sites=k)

"""The machinery every schedule shares: the op vocabulary and orders (:mod:`.ir`), the cost model
(:mod:`.costs`; its stochastic time, per-op jitter and persistent stragglers, :mod:`.jitter`), the one timer (:mod:`.timer`, :mod:`.build`), the timed record (:mod:`.timeline`),
what a timeline reports (:mod:`.memory`, :mod:`.delays`, :mod:`.offload`), the readiness rules
(:mod:`.readiness`), data-parallel pipelines around a schedule (:mod:`.data_parallel`), the search
(:mod:`.search`, :mod:`.search_heuristic`, :mod:`.search_exact`), torch's action strings
(:mod:`.torch_format`) and :class:`~.entry.ScheduleEntry`, the shape of one schedule. No schedule
lives here: each is a module of :mod:`rpd.schedules.family`."""

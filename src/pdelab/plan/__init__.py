"""What a run profile's training will cost, before any of it runs (``pdelab plan``).

The plan counts one training step per distinct model on fake tensors and turns the counts into
each job's FLOPs, peak memory, card fit, GPU-hours and (for CPU jobs) CPU core-hours:

* :mod:`pdelab.plan.hardware`: the GPUs and the CPU core a step is timed on, and their rates;
* :mod:`pdelab.plan.measured`: the measurements that replace those assumed rates;
* :mod:`pdelab.plan.tracker`, :mod:`pdelab.plan.cuda_kernels`, :mod:`pdelab.plan.counting`:
  one training step counted on fake tensors (FLOPs, live bytes), on the CPU's kernels or on
  CUDA's emulated ones;
* :mod:`pdelab.plan.step_counts`: every distinct step of a plan counted once, cached on disk;
* :mod:`pdelab.plan.cost`: the plan itself, per job, per study and in total;
* :mod:`pdelab.plan.render`: the plan as Markdown or text, and its JSON data file;
* :mod:`pdelab.plan.booking`: what to book per GPU kind, GPU-hours and wall-clock on N GPUs;
* :mod:`pdelab.plan.budget`: the claims a budget of GPU-hours decides first (greedy);
* :mod:`pdelab.plan.check`: a counted step against a real, measured one;
* ``python -m pdelab.plan`` (:mod:`pdelab.plan.__main__`): ``pdelab plan``'s writer and the
  check's command line.
"""

"""NetSenseML: network-adaptive gradient compression for any PyTorch DDP job.

Modules: ``methods`` (the method registry and grammar; torch-free), ``compress``
(compressors, one module per family), ``memory`` (error feedback), ``comm`` (allreduce /
all-gather with byte and time accounting), ``counted_group`` (a process group counting a raw
hook's collectives), ``sense`` (BBR-style network monitor), ``policy`` (the adaptive
data-reduction policy), ``paper_rule`` (the NetSenseML prototype's rule, method
``netsenseml-paper``), ``stellatrain`` and ``accordion`` (the adaptive peers StellaTrain and
Accordion, methods of the same names), ``loop`` (the step loop every adaptive method runs
in), ``gradnorms`` (the accumulated gradient norms Accordion reads), ``replay`` (synthetic
link traces through the adaptive policies, no torch),
``hooks`` (DDP comm hooks: ``hooks.register(ddp_model, "netsenseml")``), ``lifecycle``
(``hooks.clean_exit()`` / ``hooks.shutdown()``: leaving a DDP process without gloo's exit
race). Plug-ins by import
path: ``PLUGINS.md``. No Mininet or testbed import here.
"""

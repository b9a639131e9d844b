"""Simulation for scale: the per-step model (``model``) and its calibration from run folders
(``calibrate``). ``python -m testbed.simulation RESULTS`` prints the prediction-error table.
The design is in DESIGN.md, "Simulation for scale".
"""

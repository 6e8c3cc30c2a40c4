"""The performance model: every algorithm's time predicted from measured constants, as
PCI-HIB (seed 000, eqs. 2-22) predicts GRAPE's, with the network (seed 001) and storage
(seed 002) terms. ``gravpipe bench model`` calibrates and compares, ``gravpipe model
predict`` answers for any size, rank count or machine file, ``gravpipe run`` prints its
forecast."""

from gravpipe.perfmodel.machinefile import MachineFileError, cache_path, load, load_calibration, save, validate
from gravpipe.perfmodel.model import Breakdown, Model, Prediction, predict

__all__ = ["Breakdown", "MachineFileError", "Model", "Prediction", "cache_path", "load", "load_calibration",
           "predict", "save", "validate"]

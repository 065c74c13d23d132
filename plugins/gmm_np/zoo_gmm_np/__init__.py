"""GMM-NP (Volpp et al., ICLR 2023) as a zoo plugin: the method ``gmm-np`` and its ablations as
hyper-parameter variants (:data:`VARIANTS`). See :mod:`zoo_gmm_np.method` for the model and its
public API (``fit``, ``bounds``), :mod:`zoo_gmm_np.trng` for the update, :mod:`zoo_gmm_np.gmm` for
the batched mixtures."""

from __future__ import annotations

import zoo
from zoo_gmm_np.gmm import GMM
from zoo_gmm_np.method import GMMNP, VARIANTS, Bounds


@zoo.hookimpl
def zoo_register_methods(register):
    register(GMMNP)


__all__ = ["GMM", "GMMNP", "VARIANTS", "Bounds"]

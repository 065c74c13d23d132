"""Stein control variates (Sun 2023, Ch. 3-5): estimators of ``E_pi[f]`` from samples of ``pi``,
``f`` at them and the score ``grad log pi``, with a fitted zero-mean function removing variance.

Modules: :mod:`.fitting` (the split and the fitted-intercept estimators shared by every CV),
:mod:`.linear` (polynomial CVs and control functionals, both linear in ``f``), :mod:`.neural`
(neural and meta-learned CVs, batched over tasks), :mod:`.vector_valued` (vv-CVs for several
related integrals), :mod:`.gaussian` (the estimators of :mod:`zoo.expectations`, for Gaussian
expectations inside the latent-Gaussian classifiers) and :mod:`.methods` (methods of the
integration task kind).
"""

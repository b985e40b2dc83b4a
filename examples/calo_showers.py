"""Synthetic electromagnetic showers in a cubic calorimeter, and their energy profiles.

No detector simulation is downloaded or run: each shower is drawn from the textbook
parametrisation of electromagnetic showers (Longo and Sestili; Grindhammer and Peters,
as in GFlash), deposited as energy spots in a grid of n x n x n cells (a block 4 Moliere radii wide
and high and 24 radiation lengths deep, whatever n):

- longitudinal: the depth t (in radiation lengths X0) of each spot follows a gamma
  distribution, dE/dt ~ (bt)^(a-1) exp(-bt), whose maximum t_max = (a-1)/b = ln(E/Ec) - 0.5
  moves deeper logarithmically with the primary energy E (Ec: critical energy);
  a fluctuates from shower to shower;
- transverse: the distance r (in Moliere radii R_M) from the shower axis is drawn from a
  narrow Gaussian core or a wider exponential halo; the halo's share and the core's width
  grow with depth, so showers broaden as they develop;
- the axis enters at the centre of the front face, jittered by up to half a cell; energy
  that falls outside the grid leaks (the "containment" below 1).

Everything is float32 numpy, reproducible from the seed.
"""

from __future__ import annotations

import numpy as np

CRITICAL_ENERGY_GEV = 0.008  # about tungsten's
B_LONGITUDINAL = 0.5  # the gamma distribution's b (1/X0)
DEPTH_X0 = 24.0  # the calorimeter's depth, in radiation lengths (cells layers)
WIDTH_RM = 4.0  # its width and height, in Moliere radii (cells x cells cells)
SPOTS = 400  # energy spots per shower (sampling fluctuations ~ 1/sqrt(SPOTS))


def simulate(
    n_showers: int,
    cells: int,
    seed: int | tuple[int, ...],
    e_min: float = 10.0,
    e_max: float = 100.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(showers, energies): showers (n, cells, cells, cells) in GeV per cell, axes
    (x, y, z) with z the depth; energies (n,) the primary energies in GeV, uniform in
    [e_min, e_max]."""
    rng = np.random.default_rng(seed)
    energy = rng.uniform(e_min, e_max, n_showers)
    t_max = np.log(energy / CRITICAL_ENERGY_GEV) - 0.5
    a = (1.0 + B_LONGITUDINAL * t_max) * rng.lognormal(0.0, 0.08, n_showers)
    depth = rng.gamma(a[:, None], 1.0 / B_LONGITUDINAL, (n_showers, SPOTS))  # X0

    # Transverse: core (Gaussian) or halo (exponential in the plane: r ~ Gamma(2)).
    tau = depth / t_max[:, None]  # depth relative to the shower maximum
    halo_share = np.clip(0.1 + 0.15 * tau, 0.0, 0.6)
    in_halo = rng.random((n_showers, SPOTS)) < halo_share
    core_r = rng.rayleigh(0.2 * (1.0 + 0.3 * tau))
    halo_r = rng.gamma(2.0, 0.35, (n_showers, SPOTS))
    r = np.where(in_halo, halo_r, core_r)  # R_M
    phi = rng.uniform(0.0, 2.0 * np.pi, (n_showers, SPOTS))
    offset = rng.uniform(-0.5, 0.5, (n_showers, 2, 1))  # impact point jitter, cells

    centre, cell_rm, layer_x0 = cells / 2.0, WIDTH_RM / cells, DEPTH_X0 / cells
    ix = np.floor(centre + offset[:, 0] + r * np.cos(phi) / cell_rm).astype(np.int64)
    iy = np.floor(centre + offset[:, 1] + r * np.sin(phi) / cell_rm).astype(np.int64)
    iz = np.floor(depth / layer_x0).astype(np.int64)
    inside = (ix >= 0) & (ix < cells) & (iy >= 0) & (iy < cells) & (iz < cells)

    shower = np.broadcast_to(np.arange(n_showers)[:, None], inside.shape)
    flat = ((shower * cells + ix) * cells + iy) * cells + iz
    spot_energy = np.broadcast_to((energy / SPOTS)[:, None], inside.shape)
    grid = np.bincount(
        flat[inside], weights=spot_energy[inside], minlength=n_showers * cells**3
    ).reshape(n_showers, cells, cells, cells)
    return grid.astype(np.float32), energy.astype(np.float32)


def profiles(showers: np.ndarray) -> np.ndarray:
    """(3, cells): the mean energy per slice along x, y and z (summed over the other two
    axes, averaged over the showers), in the showers' unit."""
    s = np.asarray(showers, np.float64).reshape(showers.shape[:4])
    return np.stack([s.sum(axis=(2, 3)), s.sum(axis=(1, 3)), s.sum(axis=(1, 2))]).mean(axis=1)


def profile_distance(real: np.ndarray, generated: np.ndarray) -> np.ndarray:
    """Per axis, the relative L1 distance sum|generated - real| / sum(real) of two
    (3, cells) profiles: 0 when they agree, 2 when they share no energy."""
    return np.abs(generated - real).sum(axis=1) / real.sum(axis=1)

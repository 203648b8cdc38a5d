"""Where a prompt's tokens land in the sequence's positions (llamacpp.vision.grid_positions): one a token, except
that an M-RoPE image takes its grid's positions; a cut inside an image counts to the image's start."""

from __future__ import annotations

from app.core.engines.inputs.images import image_start
from app.core.engines.llamacpp.vision import grid_positions

A, B = -5, -9  # two images' runs: A is 6 tokens on a 3-position grid, B 4 tokens on 2
GRID = {A: (6, 3), B: (4, 2)}
PROMPT = [1, 2] + [A] * 6 + [3, 4] + [B] * 4 + [5]


def test_without_m_rope_images_every_token_is_a_position():
    assert [grid_positions(PROMPT, n, {}) for n in (0, 5, len(PROMPT))] == [0, 5, len(PROMPT)]


def test_an_m_rope_image_takes_its_grid_and_the_text_after_it_follows_on():
    assert grid_positions(PROMPT, 2, GRID) == 2
    assert grid_positions(PROMPT, 8, GRID) == 2 + 3  # the text before, then A's three
    assert grid_positions(PROMPT, 10, GRID) == 2 + 3 + 2
    assert grid_positions(PROMPT, len(PROMPT), GRID) == 2 + 3 + 2 + 2 + 1


def test_a_cut_inside_an_image_counts_to_its_start_as_the_cache_cuts_there():
    assert grid_positions(PROMPT, 5, GRID) == 2
    assert image_start(PROMPT, 5) == 2


def test_the_same_image_twice_in_a_row_is_two_grids():
    twice = [1] + [A] * 12 + [2]
    assert grid_positions(twice, len(twice), GRID) == 1 + 3 + 3 + 1
    assert grid_positions(twice, 10, GRID) == 1 + 3  # the second one cut: to its start

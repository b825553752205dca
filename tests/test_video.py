"""jaxrl_rollout.video: recorded episodes, every suite's render hook, encoding, run selection.

Suite hooks draw a few steps of a random policy, or, where compiling a step is
slow (brax, craftax), the reset states of a few keys. A suite's test skips only
when its package is not installed; navix needs Python >= 3.12 and runs under CI's
.venv-navix (`-k navix`), where the `video` extra is not installed: nothing
navix's test uses imports imageio.
"""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxrl_rollout as jr
from jaxrl_rollout import envs, video
from tests.toy_envs import CountingEnv, mlp_policy

PYTHON_OK = sys.version_info >= (3, 12)


def random_episode(env, params, num_steps, key=0):
    """One recorded episode (at most num_steps) of a uniform random policy: (recording, states [L, ...])."""
    policy_fn = jr.uniform_random_policy(env.action_space(params))
    rec = jax.jit(lambda k: video.record_episodes(env, params, policy_fn, None, k, 1, max_steps=num_steps))(
        jax.random.key(key)
    )
    return rec, video.episode_states(rec, 0)


def reset_states(env, params, num_keys=2):
    """The reset states of `num_keys` keys, stacked [K, ...] as a time axis."""
    keys = jax.random.split(jax.random.key(0), num_keys)
    return jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)[1]


def assert_frames(frames, length, min_size=32):
    """uint8 RGB frames [length, H, W, 3] of at least min_size pixels a side, not blank, and not all the same."""
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[0] == length and frames.shape[-1] == 3
    assert min(frames.shape[1:3]) >= min_size and frames.std() > 0
    assert any(not np.array_equal(frames[0], f) for f in frames[1:]), "the frames do not change"


# ---- recording, encoding, decoding ----


def test_recorded_episodes_are_evaluates_and_their_video_decodes_to_changing_frames(tmp_path):
    imageio = pytest.importorskip("imageio.v3")
    env, params = gymnax.make("CartPole-v1")
    policy_fn, policy_params = mlp_policy(jax.random.key(1))
    key = jax.random.key(3)
    rec = jax.jit(lambda k: video.record_episodes(env, params, policy_fn, policy_params, k, 3, max_steps=40))(key)
    ev = jr.evaluate(env, params, policy_fn, policy_params, key, 3, max_steps=40)
    np.testing.assert_array_equal(rec.returns, ev.returns)
    np.testing.assert_array_equal(rec.lengths, ev.lengths)
    np.testing.assert_array_equal(rec.completed, ev.completed)
    np.testing.assert_allclose(rec.rewards.sum(axis=0), rec.returns)
    # the states are the ones acted on: the first is the reset state, the time field counts the steps
    states = video.episode_states(rec, 0)
    length = int(rec.lengths[0])
    np.testing.assert_array_equal(states.time, np.arange(length))
    _, first = env.reset(jax.random.split(jax.random.split(key)[0], 3)[0], params)
    np.testing.assert_allclose(states.x[0], first.x)

    frames = video.render_frames(env, params, states)
    assert_frames(frames, length)
    path = video.write_video(tmp_path / "cartpole.mp4", frames, fps=15)
    assert path == tmp_path / "cartpole.mp4"
    decoded = imageio.imread(path, plugin="FFMPEG")  # [T, H, W, 3]
    assert decoded.shape[0] == length and decoded.shape[1:] == (400, 608, 3)  # 600 padded to a multiple of 16
    assert np.abs(decoded[-1].astype(int) - decoded[0]).mean() > 0.1  # the pole moved
    assert np.abs(decoded[0, :, :600].astype(int) - frames[0]).mean() < 8  # lossy, but the same picture


def test_html_embeds_videos_side_by_side_with_escaped_captions(tmp_path):
    import base64

    frames = np.zeros((4, 16, 16, 3), np.uint8)
    frames[:, :, :8] = np.arange(4)[:, None, None, None] * 60
    mp4 = video.write_video(tmp_path / "a.mp4", frames, fps=4)
    gif = tmp_path / "b.gif"
    gif.write_bytes(video.gif_bytes(frames, fps=4))
    page = video.html([mp4, gif], captions=["best <seed 3>", "worst"], width=200)
    sources = re.findall(r'src="data:([a-z/0-9]+);base64,([^"]+)"', page)
    assert [kind for kind, _ in sources] == ["video/mp4", "image/gif"]
    assert base64.b64decode(sources[0][1]) == mp4.read_bytes() and base64.b64decode(sources[1][1]) == gif.read_bytes()
    assert "best &lt;seed 3&gt;" in page and page.count("<figure") == 2 and 'width="200"' in page
    with pytest.raises(ValueError, match=r"a.txt: html\(\) plays .mp4, .webm and .gif"):
        video.html(tmp_path / "a.txt")
    with pytest.raises(ValueError, match="one caption per video"):
        video.html([mp4, gif], captions=["one"])


def test_without_ffmpeg_a_gif_is_written_with_a_warning(tmp_path, monkeypatch):
    imageio = pytest.importorskip("imageio.v3")
    frames = np.zeros((3, 20, 30, 3), np.uint8)
    frames[1, 5:10], frames[2, 10:15] = 255, 128
    monkeypatch.setattr(video, "_ffmpeg", lambda: "no ffmpeg binary (simulated)")
    with pytest.warns(UserWarning, match="no ffmpeg binary") as warned:
        path = video.write_video(tmp_path / "clip.mp4", frames, fps=10)
    assert path == tmp_path / "clip.gif"
    assert [w.filename for w in warned] == [__file__]  # the caller's line, not the package's
    decoded = imageio.imread(path, index=None)
    assert decoded.shape[0] == 3 and decoded.shape[1:3] == (20, 30)
    np.testing.assert_array_equal(decoded[..., :3], frames)  # gif is lossless for these few colours
    with pytest.raises(ValueError, match="RGB"):
        video.write_video(tmp_path / "bad.gif", np.zeros((3, 20, 30)), fps=10)


def _leftovers(folder):
    """Files in `folder` a write left behind: temporary ".<name>.<random>.tmp" files (any hidden file)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("name", ["clip.mp4", "clip.gif"])
def test_a_symlink_at_the_videos_name_is_replaced_never_written_through(name, tmp_path):
    """ffmpeg (and open()) followed a symlink planted at the video's name and wrote outside the folder."""
    pytest.importorskip("imageio.v3")
    frames = np.zeros((3, 16, 16, 3), np.uint8)
    folder, outside = tmp_path / "videos", tmp_path / "outside"
    folder.mkdir()
    outside.write_bytes(b"keep me")
    (folder / name).symlink_to(outside)
    (folder / f"dangling_{name}").symlink_to(tmp_path / "nowhere" / "x")
    for target in (folder / name, folder / f"dangling_{name}"):
        assert video.write_video(target, frames, fps=5) == target
        assert target.is_file() and not target.is_symlink() and target.stat().st_size > 0
    assert outside.read_bytes() == b"keep me" and not (tmp_path / "nowhere").exists()
    assert _leftovers(folder) == []


def test_a_name_near_the_file_name_limit_is_written(tmp_path):
    """The temporary name (".<name>.<random>.tmp") went past the 255-byte limit for a legal 249-byte name."""
    pytest.importorskip("imageio.v3")
    target = tmp_path / ("n" * 245 + ".gif")
    assert video.write_video(target, np.zeros((2, 8, 8, 3), np.uint8), fps=5) == target
    assert target.stat().st_size > 0 and _leftovers(tmp_path) == []


def test_write_video_refuses_in_one_line_what_it_cannot_write_and_leaves_no_file(tmp_path, monkeypatch, capfd):
    """ffmpeg's failures were returned as success (a folder of the video's name, a name without an extension) with
    ffmpeg's messages on stderr; an .avi got an mp4 inside."""
    pytest.importorskip("imageio.v3")
    import imageio_ffmpeg

    frames = np.zeros((8, 64, 64, 3), np.uint8)  # more than a pipe's buffer: a stopped ffmpeg breaks the pipe
    (tmp_path / "taken.mp4").mkdir()
    (tmp_path / "taken.gif").mkdir()
    (tmp_path / "file").write_text("")

    def refused(path, error, match):
        with pytest.raises(error, match=match) as info:
            video.write_video(path, frames, fps=5)
        assert "\n" not in str(info.value) and str(path) in str(info.value)
        assert capfd.readouterr() == ("", "")  # no ffmpeg messages
        assert _leftovers(tmp_path) == []

    refused(tmp_path / "taken.mp4", IsADirectoryError, r": a folder of that name is there\.$")
    refused(tmp_path / "taken.gif", IsADirectoryError, r": a folder of that name is there\.$")
    refused(tmp_path / "noext", ValueError, r"its name has no extension; write_video writes \.mp4 \(H\.264\) and \.gif")
    refused(tmp_path / "clip.avi", ValueError, r"its name ends in '\.avi'")
    refused(tmp_path / "missing" / "clip.mp4", FileNotFoundError, r"its folder .*missing does not exist\.$")
    refused(tmp_path / "file" / "clip.gif", FileNotFoundError, r"its folder .*file is not a folder\.$")
    assert not (tmp_path / "noext").exists() and not (tmp_path / "clip.avi").exists()
    if os.geteuid() != 0:  # root writes in any folder
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        refused(locked / "clip.mp4", OSError, "Permission denied")
    # ffmpeg itself fails (a full disk, ...): its first error line, not success
    fake = tmp_path / "fake-ffmpeg"
    fake.write_text("#!/bin/sh\necho '[out#0/mp4 @ 0x55] Error opening output: No space left on device' >&2\n"
                    "echo 'Error opening output files: No space left on device' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: str(fake))
    refused(tmp_path / "full.mp4", OSError, r"full\.mp4: ffmpeg failed \(Error opening output: No space left on "
                                            r"device\)\.$")
    assert not (tmp_path / "full.mp4").exists()


def test_an_interrupted_write_leaves_the_previous_file_and_no_partial_one(tmp_path, monkeypatch):
    """A Ctrl-C while encoding left a 48-byte .mp4 under the video's own name."""
    pytest.importorskip("imageio.v3")
    frames = np.zeros((6, 16, 16, 3), np.uint8)
    for name in ("clip.mp4", "clip.gif"):
        (tmp_path / name).write_bytes(b"the previous video")
    padded, gif = video._padded, video._write_gif

    def ctrl_c_after_two_frames(frames, multiple, size=None):
        for t, frame in enumerate(padded(frames, multiple, size)):
            if t == 2:
                raise KeyboardInterrupt
            yield frame

    def ctrl_c_midway(file, frames, fps):
        file.write(b"GIF89a")
        raise KeyboardInterrupt

    monkeypatch.setattr(video, "_padded", ctrl_c_after_two_frames)
    monkeypatch.setattr(video, "_write_gif", ctrl_c_midway)
    for name in ("clip.mp4", "clip.gif"):
        with pytest.raises(KeyboardInterrupt):
            video.write_video(tmp_path / name, frames, fps=5)
        assert (tmp_path / name).read_bytes() == b"the previous video"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.gif", "clip.mp4"]  # no temporary file either
    monkeypatch.setattr(video, "_padded", padded)
    monkeypatch.setattr(video, "_write_gif", gif)
    assert video.write_video(tmp_path / "clip.mp4", frames, fps=5).read_bytes() != b"the previous video"


def test_a_gif_keeps_every_frames_colours_exactly_and_reduces_a_frame_of_more_than_256():
    imageio = pytest.importorskip("imageio.v3")
    rng = np.random.default_rng(0)
    # 3 frames of at most 200 colours each, 600 in all: more than one palette holds, each frame's exact
    palettes = rng.integers(0, 256, (3, 200, 3), dtype=np.uint8)
    frames = palettes[np.arange(3)[:, None, None], rng.integers(0, 200, (3, 24, 40))]
    decoded = imageio.imread(video.gif_bytes(frames, fps=10), index=None, extension=".gif")[..., :3]
    np.testing.assert_array_equal(decoded, frames)
    # a frame of 4,096 colours, more than a GIF frame holds, is reduced to 256 (median cut): close, not exact
    ramp = np.stack([*np.meshgrid(np.arange(64) * 4, np.arange(64) * 4, indexing="ij"), np.full((64, 64), 128)], -1)
    frames = np.stack([ramp, ramp[::-1]]).astype(np.uint8)
    decoded = imageio.imread(video.gif_bytes(frames, fps=10), index=None, extension=".gif")[..., :3]
    assert decoded.shape == frames.shape
    error = np.abs(decoded.astype(int) - frames)
    assert 0 < error.mean() < 4 and error.max() <= 16
    with pytest.raises(ValueError, match="at least one frame"):
        video.gif_bytes(np.zeros((0, 8, 8, 3), np.uint8))
    # a strided view (TensorBoard's thinned frames) gives the GIF of its copy
    assert video.gif_bytes(frames[:, ::2, ::3]) == video.gif_bytes(np.ascontiguousarray(frames[:, ::2, ::3]))


def test_frames_of_more_than_256_colours_share_one_palette_and_take_its_nearest_colours(monkeypatch):
    """One median cut per episode, not per frame, and no dithering: each pixel its palette's nearest colour."""
    imageio = pytest.importorskip("imageio.v3")
    from PIL import Image

    cuts = []
    quantize = Image.Image.quantize
    monkeypatch.setattr(Image.Image, "quantize", lambda self, *a, **k: cuts.append(1) or quantize(self, *a, **k))
    y, x = np.meshgrid(np.arange(48), np.arange(40), indexing="ij")
    # 6 shaded frames (a light moving over a gradient: 1,000+ colours each) and one of 3 colours among them
    rich = [np.stack([(5 * x + 3 * t) % 256, (5 * y + 7 * t) % 256, (x * y // 8 + 11 * t) % 256], -1) for t in range(6)]
    few = np.zeros((48, 40, 3), np.uint8)
    few[:, 10:], few[:, 25:] = (200, 30, 30), (10, 10, 250)
    frames = np.stack(rich[:3] + [few] + rich[3:]).astype(np.uint8)
    decoded = imageio.imread(video.gif_bytes(frames, fps=10), index=None, extension=".gif")[..., :3].astype(int)
    assert len(cuts) == 1
    np.testing.assert_array_equal(decoded[3], few)  # the frame of 3 colours keeps them exactly
    shaded = np.delete(frames, 3, axis=0).reshape(-1, 3).astype(int)
    got = np.delete(decoded, 3, axis=0).reshape(-1, 3)
    palette = np.unique(got, axis=0)
    assert len(palette) <= 256
    nearest = ((shaded[:, None, :] - palette[None, :, :]) ** 2).sum(-1).min(1)
    np.testing.assert_array_equal(((got - shaded) ** 2).sum(-1), nearest)
    assert np.abs(got - shaded).mean() < 6


@pytest.mark.parametrize("shape", [(3, 20, 30, 3), (2, 16, 32, 3), (2, 17, 16, 3)])
def test_frames_are_padded_to_the_encoders_block_size_one_at_a_time_with_edge_pixels(shape):
    frames = np.random.default_rng(2).integers(0, 256, shape, dtype=np.uint8)
    height, width = shape[1:3]
    expected = np.pad(frames, ((0, 0), (0, -height % 16), (0, -width % 16), (0, 0)), mode="edge")
    np.testing.assert_array_equal(np.stack([f.copy() for f in video._padded(frames, 16)]), expected)


def _labelled_by_hand(frame, lines, font):
    """(`frame` with the label `lines` drawn with Pillow as `video._label` draws it: white on a black band at the
    top left; the band's bottom)."""
    from PIL import Image, ImageDraw

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    _, _, right, bottom = draw.multiline_textbbox((2, 2), lines, font=font)
    draw.rectangle((0, 0, right + 2, bottom + 2), fill=(0, 0, 0))
    draw.multiline_text((2, 2), lines, fill=(255, 255, 255), font=font)
    return np.asarray(image), bottom


def test_a_label_is_a_band_at_the_top_and_leaves_the_rest_of_the_frame_as_it_was():
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (3, 120, 160, 3), dtype=np.uint8)
    given = frames.copy()
    texts = ["run0  t=0  return=0.0", "best_evalseed0_seed3  update 976  t=1  return=-12.5", "gjpqy"]
    out = video._label(frames, texts)
    np.testing.assert_array_equal(frames, given)  # the input is not drawn on
    in_place = given.copy()
    assert video._label(in_place, texts, in_place=True) is in_place
    np.testing.assert_array_equal(in_place, out)
    font = ImageFont.load_default(size=10)  # the size for 120 rows
    for frame, text, labelled in zip(frames[::2], texts[::2], out[::2]):  # the labels that fit on one line
        # the whole frame drawn on, as the label's band and text are
        expected, bottom = _labelled_by_hand(frame, text, font)
        np.testing.assert_array_equal(labelled, expected)
        rows = int(np.ceil(bottom)) + 3
        np.testing.assert_array_equal(labelled[rows:], frame[rows:])
        assert (labelled[0, 0] == 0).all() and (labelled[:rows].min(axis=-1) > 128).any()  # light text on black
    # a label wider than the frame (it was cut at the right edge) is broken into lines at its double spaces, as
    # few as fit, at the same size; nothing is drawn at the frame's last column
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    lines, font = video._fitted(measure, texts[1], 10, 160)
    assert lines == "best_evalseed0_seed3\nupdate 976  t=1  return=-12.5" and font.size == 10
    assert all(measure.textbbox((2, 2), line, font=font)[2] + 2 <= 160 for line in lines.split("\n"))
    assert measure.textbbox((2, 2), f"{texts[1]}", font=font)[2] + 2 > 160  # (one line would not fit)
    np.testing.assert_array_equal(out[1][:, -3:], frames[1][:, -3:])
    band = [int(np.argmin((labelled[:, 0] == 0).all(axis=-1))) for labelled in out[:2]]  # rows black at the left
    assert band[1] > 1.8 * band[0] > 0  # two lines' band, against one line's
    # a part too wide alone makes the whole label smaller, down to 8 pixels
    lines, font = video._fitted(measure, "a_name_of_thirty_characters_xx  t=1  return=-12.5", 14, 160)
    assert lines == "a_name_of_thirty_characters_xx  t=1\nreturn=-12.5" and 8 <= font.size < 14
    assert measure.textbbox((2, 2), "a_name_of_thirty_characters_xx  t=1", font=font)[2] + 2 <= 160


def test_an_episodes_labels_keep_their_lines_as_the_step_and_return_gain_digits():
    """Each label broken on its own moved a part to the next line mid-episode ("update39_evalseed0_seed0  t=99" /
    "return=-99.5", then "update39_evalseed0_seed0" / "t=100  return=-100.0" on a 160-pixel frame): the writers
    break every label of an episode as its widest (`_widest_label`: the step's digits of its bound, a 4-digit
    return), and a label wider than that after all gets lines of its own, not cut at the edge."""
    from PIL import Image, ImageDraw

    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    steps = [(0, 0.0), (9, -9.5), (10, -10.0), (99, -99.5), (100, -100.0), (999, -999.5), (1000, -1000.0)]
    texts = [video._frame_label("update39_evalseed0_seed0", t, g) for t, g in steps]
    alone = [video._fitted(measure, text, 10, 160)[0].split("\n")[0] for text in texts]
    assert alone[3:5] == ["update39_evalseed0_seed0  t=99", "update39_evalseed0_seed0"]  # each on its own: t moved
    widest = video._widest_label("update39_evalseed0_seed0", 1000)
    assert widest == "update39_evalseed0_seed0  t=8888  return=-8888.8"
    frames = np.random.default_rng(3).integers(0, 256, (len(texts), 160, 160, 3), dtype=np.uint8)
    out = video._label(frames, texts, widest=widest)
    font = video._font(10)  # the size for 160 rows
    for text, frame, labelled in zip(texts, frames, out):
        lines = text.replace("seed0  t=", "seed0\nt=")  # as the widest one is broken: the name, then the rest
        np.testing.assert_array_equal(labelled, _labelled_by_hand(frame, lines, font)[0])
    # a return wider than the widest's: its own lines (as `_fitted` breaks it), not a line past the frame's edge
    widest = video._widest_label("run0", 100)  # one line on this frame
    long = video._frame_label("run0", 100, -123456789.0)
    assert video._fitted(measure, long, 10, 160)[0] == "run0  t=100\nreturn=-123456789.0"
    np.testing.assert_array_equal(video._label(frames[:1], [long], widest=widest), video._label(frames[:1], [long]))
    assert (out := video._label(frames[:1], [long], widest=widest)).shape == frames[:1].shape
    np.testing.assert_array_equal(out[0, :, -3:], frames[0, :, -3:])  # nothing drawn at the frame's last columns


def test_a_missing_extra_names_it_and_importing_the_package_imports_no_backend(tmp_path):
    # imageio made unimportable (a None entry in sys.modules), in a fresh interpreter
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["imageio"] = None
        import jaxrl_rollout
        import jaxrl_rollout.video as video
        heavy = ("imageio", "brax", "mujoco", "jumanji", "pgx", "craftax", "xminigrid", "navix", "pygame",
                 "cairosvg", "matplotlib.pyplot")  # gymnasium: gymnax imports it
        loaded = [m for m in sys.modules if m.split(".")[0] in heavy and sys.modules[m] is not None]
        assert not loaded, loaded
        import numpy as np
        try:
            video.write_video({str(tmp_path / 'x.mp4')!r}, np.zeros((2, 16, 16, 3), np.uint8))
        except ImportError as err:
            print("ERROR", err)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ERROR" in out.stdout and "pip install 'jaxrl-rollout[video]'" in out.stdout, out.stdout


def test_classic_control_without_pygame_names_the_video_extra(monkeypatch):
    """gymnasium's own error asked for gymnasium[classic-control]; drawing CartPole needs our `video` extra."""
    env, params = gymnax.make("CartPole-v1")
    states = jax.tree.map(lambda x: jnp.stack([x, x]), env.reset(jax.random.key(0), params)[1])
    monkeypatch.setitem(sys.modules, "pygame", None)  # unimportable
    with pytest.raises(ImportError, match=r"^drawing gymnax's CartPole-v1 needs the optional `video` extra "
                                          r"\(pygame could not be imported: .*\)\. Install it with: "
                                          r"pip install 'jaxrl-rollout\[video\]' \(from a clone: pip install -e "
                                          r"'\.\[video\]'\)$"):
        video.render_frames(env, params, states)


# ---- selecting runs, writing their videos ----


def test_run_selector():
    returns = np.array([5.0, 9.0, 1.0, 9.0])
    assert video.select_runs("best,worst,0,3", 4, returns) == [1, 2, 0, 3]
    assert video.select_runs(" worst , best ", 4, returns) == [2, 1]  # a tie: the first best
    assert video.select_runs("all", 4) == [0, 1, 2, 3]
    assert video.select_runs(2, 4) == [2] == video.select_runs(np.int64(2), 4)  # one int: "not iterable" before
    assert video.select_runs("2,all", 4) == [2, 0, 1, 3]
    assert video.select_runs(["best", 0, "0"], 4, returns) == [1, 0]
    for bad, match in [
        ("first", "unknown run 'first'"),
        ("4", "not a run index in 0..3"),
        ("-1", "not a run index"),
        ("0,,1", "empty run"),
        ("", "empty run"),
        ("best", "needs the runs' returns"),
    ]:
        with pytest.raises(ValueError, match=match):
            video.select_runs(bad, 4, None if bad == "best" else returns)


def test_write_episode_videos_picks_runs_by_return_and_names_the_files(tmp_path):
    pytest.importorskip("imageio.v3")
    env, params = gymnax.make("CartPole-v1")
    policies = [mlp_policy(jax.random.key(i), deterministic=True) for i in range(3)]
    policy_fn = policies[0][0]
    params_per_run = jax.tree.map(lambda *xs: jnp.stack(xs), *[p for _, p in policies])
    keys = jax.random.split(jax.random.key(5), 3)
    returns = jax.jit(jax.vmap(lambda p, k: jr.evaluate(env, params, policy_fn, p, k, 1, 25).returns[0]))(
        params_per_run, keys
    ).tolist()
    written = video.write_episode_videos(
        tmp_path / "videos", env, params, policy_fn, params_per_run, keys, "worst,best,0", max_steps=25,
        names=["seed0", "seed1", "seed2"], fps=20,
    )
    order = [int(np.argmin(returns)), int(np.argmax(returns))]
    order += [0] if 0 not in order else []
    assert [v.run for v in written] == order
    for v in written:
        assert v.episode_return == returns[v.run]
        assert v.path.name == f"seed{v.run}_return{returns[v.run]:.1f}.mp4" and v.path.is_file()
        assert v.path.parent == tmp_path / "videos" and v.length == int(round(v.episode_return))  # CartPole pays 1 a step
    # keys one per run: a seed int, or one key for three runs, says so before anything runs
    for bad, error, match in ((5, TypeError, r"keys must be PRNG keys \[R\], one per run \(jax.random.split\(key, R\)\), "
                               "got int"),
                              (jax.random.key(5), ValueError, r"keys must be \[R\] .* got keys of shape \(\)")):
        with pytest.raises(error, match=match):
            video.write_episode_videos(tmp_path / "bad", env, params, policy_fn, params_per_run, bad, "0")
    assert not (tmp_path / "bad").exists()


# ---- a user's env, wrappers, registration, envs that cannot render ----


class DrawnCountingEnv(CountingEnv):
    """CountingEnv drawn as a bar whose length is the step count."""

    def render(self, state, params):
        frame = np.zeros((8, 16, 3), np.uint8)
        frame[:, : int(state.time) + 1] = 255
        return frame


@struct.dataclass
class LogState:
    env_state: object
    episode_returns: jax.Array


class PassThrough:
    """A wrapper that keeps the wrapped env's state as it is (as `envs.ClipAction` does)."""

    def __init__(self, env):
        self.env = env

    @property
    def default_params(self):
        return self.env.default_params

    def action_space(self, params=None):
        return self.env.action_space(params)

    def reset(self, key, params=None):
        return self.env.reset(key, params)

    def step(self, key, state, action, params=None):
        return self.env.step(key, state, action, params)


class LogWrapper:
    """A PureJaxRL-style wrapper: its own state holds the wrapped env's in `env_state`."""

    def __init__(self, env):
        self._env = env

    @property
    def default_params(self):
        return self._env.default_params

    def action_space(self, params=None):
        return self._env.action_space(params)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs, LogState(state, jnp.float32(0))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        return obs, LogState(env_state, state.episode_returns + reward), reward, terminated, truncated, info


def test_a_users_env_renders_through_its_render_method_and_through_wrappers():
    env = DrawnCountingEnv()
    rec, states = random_episode(env, None, 5)
    frames = video.render_frames(env, None, states)
    assert_frames(frames, int(rec.lengths[0]), min_size=8)
    np.testing.assert_array_equal(frames[:, 0, :, 0].astype(bool).sum(axis=-1), np.arange(len(frames)) + 1)
    # a wrapper holding the state in `env_state`, around one that keeps the state as it is
    wrapped = LogWrapper(PassThrough(env))
    rec, states = random_episode(wrapped, None, 5)
    assert isinstance(states, LogState)
    np.testing.assert_array_equal(video.render_frames(wrapped, None, states)[:, 0, :, 0].astype(bool).sum(axis=-1),
                                  np.arange(int(rec.lengths[0])) + 1)


def test_an_unhashable_registered_renderer_is_checked_and_used():
    """check_recordable looked the hook up in a dict: a dataclass hook (eq=True, so unhashable) was a TypeError."""
    import dataclasses

    pytest.importorskip("imageio.v3")

    @dataclasses.dataclass
    class Hook:
        size: int = 4

        def __call__(self, env, params, states):
            return np.zeros((len(states.time), self.size, self.size, 3), np.uint8)

    class Drawn(DrawnCountingEnv):
        pass

    assert video.register_renderer(Drawn, Hook()) is None
    try:
        video.check_recordable(Drawn())
        _, states = random_episode(Drawn(), None, 3)
        assert video.render_frames(Drawn(), None, states).shape[1:] == (4, 4, 3)
    finally:
        video.register_renderer(Drawn, None)


def test_a_registered_renderer_takes_precedence_and_can_be_removed():
    env = DrawnCountingEnv()
    _, states = random_episode(env, None, 4)

    def grey(env, params, states):
        return np.full((len(states.time), 4, 4, 3), 7 * np.asarray(states.time)[:, None, None, None], np.uint8)

    assert video.register_renderer(CountingEnv, grey) is None
    try:
        frames = video.render_frames(env, None, states)  # a subclass of the registered class
        assert frames.shape[1:] == (4, 4, 3) and frames[-1, 0, 0, 0] == 7 * (len(frames) - 1)
    finally:
        assert video.register_renderer(CountingEnv, None) is grey
    assert video.render_frames(env, None, states).shape[1:] == (8, 16, 3)
    video.register_renderer(CountingEnv, lambda env, params, states: np.zeros((2, 4, 4)))
    try:
        with pytest.raises(ValueError, match=r"must be uint8 \[\d+, H, W, 3\]"):
            video.render_frames(env, None, states)
    finally:
        video.register_renderer(CountingEnv, None)


def test_a_videos_label_is_drawn_on_new_frames_never_on_a_registered_hooks_own_array(tmp_path):
    pytest.importorskip("imageio.v3")
    env = DrawnCountingEnv()
    policy_fn = jr.uniform_random_policy(env.action_space(None))
    assert video.find_renderer(env).new_frames  # its render method's frames are stacked anew at each call
    kept = np.full((64, 32, 48, 3), 90, np.uint8)  # a canvas its hook keeps, handing out views of it
    video.register_renderer(CountingEnv, lambda env, params, states: kept[: len(states.time)])
    try:
        assert not video.find_renderer(env).new_frames
        (written,) = video.write_episode_videos(tmp_path, env, None, policy_fn, None, jax.random.split(
            jax.random.key(0), 1), "0", max_steps=6)
    finally:
        video.register_renderer(CountingEnv, None)
    assert written.path.is_file() and (kept == 90).all()


def _steady_policy(params, obs, key):
    """Action 0 always: DrawnCountingEnv's episode runs to max_steps."""
    zeros = jnp.zeros(obs.shape[0])
    return jr.PolicyOutput(jnp.zeros(obs.shape[0], jnp.int32), zeros, zeros)


def test_a_long_episode_is_drawn_and_encoded_a_block_at_a_time_into_the_same_video(tmp_path, monkeypatch):
    """write_episode_videos draws an env whose hook draws state by state `FRAMES_PER_BLOCK` states at a time and
    hands each block to the encoder before drawing the next, so an episode's frames are never all in memory (4,000
    steps of jumanji's Snake held 3 GB of frames, and `evaluate --video` 10 GB at its peak); the file is byte for
    byte the one the whole episode's frames give. A registered hook is given the whole episode."""
    pytest.importorskip("imageio.v3")
    env, keys, length = DrawnCountingEnv(), jax.random.split(jax.random.key(0), 1), 5  # its time limit
    monkeypatch.setattr(video._EpisodeWriter, "FRAMES_PER_BLOCK", 2)
    events = []
    find, padded = video.find_renderer, video._padded

    def spied_renderer(env):
        draw = find(env)

        def spy(params, states):
            events.append(("draw", len(states.time)))
            return draw(params, states)

        spy.__dict__.update(draw.__dict__)
        return spy

    def spied_padded(frames, multiple, size=None):
        for frame in padded(frames, multiple, size):
            events.append(("encode", 1))
            yield frame

    monkeypatch.setattr(video, "find_renderer", spied_renderer)
    monkeypatch.setattr(video, "_padded", spied_padded)
    (blocked,) = video.write_episode_videos(tmp_path / "blocks", env, None, _steady_policy, None, keys, "0")
    assert blocked.length == length
    assert [n for kind, n in events if kind == "draw"] == [2, 2, 1, 1]  # and the state the episode ended in
    assert events.index(("encode", 1)) < events.index(("draw", 1))  # encoded while the episode is being drawn
    events.clear()  # frames kept for the loggers (TrainingVideos): drawn by blocks too, into one array
    ((kept, frames),) = video._EpisodeWriter(env, None, _steady_policy).write(tmp_path / "kept", None, keys, "0",
                                                                              keep_frames=True)
    assert [n for kind, n in events if kind == "draw"] == [2, 2, 1, 1] and frames.shape == (length + 1, 8, 16, 3)
    assert kept.path.name == blocked.path.name and kept.path.read_bytes() == blocked.path.read_bytes()
    # the same file as the whole episode's frames, drawn at once and labelled as the videos are
    states = video.episode_states(jax.jit(lambda k: video.record_episodes(env, None, _steady_policy, None, k))(
        keys[0]), 0)
    # and last the state it ended in (its time limit's: time 5), which record_episodes does not keep
    states = jax.tree.map(lambda x, y: np.concatenate([x, y]), states,
                          states.replace(time=states.time[-1:] + 1, tag=states.tag[-1:]))
    whole = video._label(video.render_frames(env, None, states), [f"run0  t={t}  return={t * (t + 1) / 2:.1f}"
                                                                  for t in range(length + 1)])
    np.testing.assert_array_equal(frames, whole)
    assert video.write_video(tmp_path / "whole.mp4", whole, fps=30).read_bytes() == blocked.path.read_bytes()
    # recorded RECORD_BLOCK steps at a time on the device and drawn as each block comes: the same file (the returns
    # on the frames summed across blocks), and an episode cut by max_steps inside a block ends there
    monkeypatch.setattr(video._EpisodeWriter, "RECORD_BLOCK", 3)
    events.clear()
    label, texts, widest = video._label, [], set()
    monkeypatch.setattr(video, "_label", lambda frames, given, **kwargs: texts.extend(given) or widest.add(
        kwargs.get("widest")) or label(frames, given, **kwargs))
    (stepped,) = video.write_episode_videos(tmp_path / "stepped", env, None, _steady_policy, None, keys, "0")
    assert [n for kind, n in events if kind == "draw"] == [2, 1, 2, 1]
    assert texts == [f"run0  t={t}  return={t * (t + 1) / 2:.1f}" for t in range(length + 1)]  # (too small to see)
    assert widest == {"run0  t=8  return=-8888.8"}  # every block's labels broken as the episode's widest (limit 5)
    assert stepped.path.name == blocked.path.name and stepped.path.read_bytes() == blocked.path.read_bytes()
    (cut,) = video.write_episode_videos(tmp_path / "cut", env, None, _steady_policy, None, keys, "0", max_steps=4)
    assert cut.length == 4 and cut.path.name == "run0_return10.0.mp4", cut  # rewards 1 to 4
    monkeypatch.undo()
    monkeypatch.setattr(video._EpisodeWriter, "FRAMES_PER_BLOCK", 2)
    monkeypatch.setattr(video, "find_renderer", spied_renderer)
    monkeypatch.setattr(video, "_padded", spied_padded)
    # the loggers' copy is the episode's first KEPT_FRAMES frames (a long episode's whole copy could fill the
    # memory); the file has them all
    monkeypatch.setattr(video, "KEPT_FRAMES", 3)
    ((capped, first),) = video._EpisodeWriter(env, None, _steady_policy).write(tmp_path / "capped", None, keys, "0",
                                                                               keep_frames=True)
    np.testing.assert_array_equal(first, whole[:3])
    assert capped.path.read_bytes() == blocked.path.read_bytes()

    hooked = []
    video.register_renderer(CountingEnv, lambda env, params, states: hooked.append(len(states.time)) or np.arange(
        len(states.time) * 8 * 16 * 3, dtype=np.uint8).reshape(len(states.time), 8, 16, 3))
    try:
        video.write_episode_videos(tmp_path / "hook", env, None, _steady_policy, None, keys, "0")
        ((_, first),) = video._EpisodeWriter(env, None, _steady_policy, label=False).write(
            tmp_path / "hook_kept", None, keys, "0", keep_frames=True)  # drawn whole: its first 3 frames copied
    finally:
        video.register_renderer(CountingEnv, None)
    assert hooked == [length + 1, length + 1]  # the whole episode's states at once, the one it ended in too
    np.testing.assert_array_equal(first, np.arange(3 * 8 * 16 * 3, dtype=np.uint8).reshape(3, 8, 16, 3))


def test_a_video_that_takes_long_says_how_far_it_is(tmp_path, monkeypatch):
    """`progress` is given a line once a video has taken `PROGRESS_AFTER_S` to draw and encode, then every
    `PROGRESS_EVERY_S`: 4,000 steps of jumanji's Snake took 105 s a video, and `train --video-every` said nothing
    meanwhile. A fast video says nothing."""
    pytest.importorskip("imageio.v3")
    env, keys = DrawnCountingEnv(), jax.random.split(jax.random.key(0), 1)  # 5 steps, then the state it ended in
    monkeypatch.setattr(video._EpisodeWriter, "FRAMES_PER_BLOCK", 2)
    lines = []
    video.write_episode_videos(tmp_path, env, None, _steady_policy, None, keys, "0", progress=lines.append)
    assert lines == []

    def said(**times):
        for name, seconds in times.items():
            monkeypatch.setattr(video, name, seconds)
        lines.clear()
        video.write_episode_videos(tmp_path, env, None, _steady_policy, None, keys, "0", caption="  update 4",
                                   progress=lines.append)
        return [re.sub(r"in \d+ s", "in * s", line) for line in lines]

    line = "  video of run0, update 4: {} frames drawn and encoded in * s, of an episode of at most 5 steps"
    assert said(PROGRESS_AFTER_S=0.0, PROGRESS_EVERY_S=0.0) == [line.format(n) for n in (2, 4, 5, 6)]
    assert said(PROGRESS_EVERY_S=1e9) == [line.format(2)]  # the first block's, then none within the next 1e9 s
    with pytest.raises(TypeError, match="progress must be None or a callable .* got str"):
        video.write_episode_videos(tmp_path, env, None, _steady_policy, None, keys, "0", progress="stderr")
    with pytest.raises(TypeError, match="progress must be None or a callable .* got str"):
        video.TrainingVideos(tmp_path, env, None, _steady_policy, lambda s: s, keys, 1, progress="stderr")


def test_a_videos_episode_is_recorded_a_block_at_a_time_whatever_its_time_limit():
    """The device keeps `RECORD_BLOCK` steps' states of a video's episode, not its time limit's: one program kept
    them all (`record_episodes`), and full Craftax's 100,000 steps of 273 kB states (27 GB) ended `evaluate --video`
    at the kernel's hand, with no message."""
    env = DrawnCountingEnv()

    def output_bytes(max_steps):
        writer = video._EpisodeWriter(env, None, _steady_policy, max_steps=max_steps)
        state = writer._start(jax.random.key(0))
        compiled = writer._steps.lower(None, state, jnp.ones((1,), bool), jnp.int32(0)).compile()
        return compiled.memory_analysis().output_size_in_bytes

    block = video._EpisodeWriter.RECORD_BLOCK
    assert output_bytes(10**7) == output_bytes(block) > output_bytes(block // 2)


def test_write_video_takes_blocks_of_frames_and_refuses_blocks_of_another_size(tmp_path):
    pytest.importorskip("imageio.v3")
    frames = np.random.default_rng(0).integers(0, 256, (7, 20, 24, 3), dtype=np.uint8)
    for suffix in (".mp4", ".gif"):
        whole = video.write_video(tmp_path / f"whole{suffix}", frames, fps=5).read_bytes()
        blocks = (frames[i:i + 3] for i in range(0, 7, 3))
        assert video.write_video(tmp_path / f"blocks{suffix}", blocks, fps=5).read_bytes() == whole
        assert video.write_video(tmp_path / f"list{suffix}", list(frames), fps=5).read_bytes() == whole
    with pytest.raises(ValueError, match=r"blocks of frames must all be \[t, H, W, 3\] of one H and W"):
        video.write_video(tmp_path / "bad.mp4", iter([frames[:2], frames[:2, :16]]), fps=5)
    with pytest.raises(ValueError, match="needs at least one frame"):
        video.write_video(tmp_path / "none.mp4", iter([frames[:0]]), fps=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{kind}{suffix}" for kind in ("whole", "blocks", "list") for suffix in (".mp4", ".gif"))


def test_write_episode_videos_takes_a_run_index_or_a_sequence_of_them_and_a_prefix(tmp_path):
    """runs=1 was a TypeError ("'int' object is not iterable"), though select_runs takes one int."""
    pytest.importorskip("imageio.v3")
    env = DrawnCountingEnv()
    policy_fn = jr.uniform_random_policy(env.action_space(None))
    keys = jax.random.split(jax.random.key(0), 3)
    for runs, want in ((1, [1]), (np.int64(2), [2]), ([2, 0], [2, 0]), ((0, "1"), [0, 1])):
        written = video.write_episode_videos(tmp_path / str(want), env, None, policy_fn, None, keys, runs,
                                             names=["a", "b", "c"], max_steps=4)
        assert [v.run for v in written] == want
        assert [v.path.name for v in written] == [f"{'abc'[r]}_return{v.episode_return:.1f}.mp4"
                                                  for r, v in zip(want, written)]
        assert all(v.path.is_file() for v in written)
    # a prefix tells apart the videos of different calls (`evaluate --video`: the checkpoint's update, its --seed)
    (written,) = video.write_episode_videos(tmp_path, env, None, policy_fn, None, keys, 2, names=["a", "b", "c"],
                                            prefix="update7_evalseed3_", max_steps=4)
    assert written.path == tmp_path / f"update7_evalseed3_c_return{written.episode_return:.1f}.mp4"
    with pytest.raises(TypeError, match="^a run selector is a string such as 'best,worst,0,3'"):
        video.select_runs(True, 3)


def test_the_packages_a_renderer_draws_with_are_checked_before_anything_runs(tmp_path, monkeypatch):
    """Without pygame, `train --video-every` trained chunks and then died at its first video: only imageio was
    checked. check_recordable, write_episode_videos and TrainingVideos import what the env's hook draws with."""
    env, params = gymnax.make("CartPole-v1")
    video.check_recordable(env)
    monkeypatch.setitem(sys.modules, "pygame", None)  # unimportable
    policy_fn = jr.uniform_random_policy(env.action_space(params))
    keys = jax.random.split(jax.random.key(0), 1)
    match = r"^drawing gymnax's CartPole-v1 needs the optional `video` extra \(pygame could not be imported"
    monkeypatch.setattr(video, "record_episodes", lambda *a, **k: pytest.fail("an episode ran"))
    for call in (lambda: video.check_recordable(env),
                 lambda: video.check_recordable(PassThrough(env)),  # through a wrapper
                 lambda: video.write_episode_videos(tmp_path / "v", env, params, policy_fn, None, keys, 0),
                 lambda: video.TrainingVideos(tmp_path / "t", env, params, policy_fn, lambda s: s, keys, 1)):
        with pytest.raises(ImportError, match=match):
            call()
    assert not (tmp_path / "v").exists() and not (tmp_path / "t").exists()
    if importlib.util.find_spec("pgx") is not None:
        pgx_env, _ = envs.make("pgx/tic_tac_toe")
        video.check_recordable(pgx_env)
        monkeypatch.setitem(sys.modules, "cairosvg", None)
        with pytest.raises(ImportError, match=r"^rendering pgx games needs cairosvg .*pip install 'jaxrl-rollout\[video\]'"):
            video.check_recordable(pgx_env)


def test_a_render_method_may_draw_a_matplotlib_figure():
    env, params = gymnax.make("Catch-bsuite")  # gymnax's render(state, params) -> (fig, ax)
    rec, states = random_episode(env, params, 3)
    assert_frames(video.render_frames(env, params, states), int(rec.lengths[0]))


def test_envs_that_cannot_render_get_one_line_naming_them():
    deep_sea, _ = gymnax.make("DeepSea-bsuite")
    for env, name in [(CountingEnv(), "CountingEnv"), (deep_sea, "DeepSea-bsuite"),
                      (LogWrapper(CountingEnv()), "LogWrapper (wrapping CountingEnv)")]:
        with pytest.raises(ValueError, match="^cannot render " + re.escape(name)) as err:
            video.find_renderer(env)
        assert "\n" not in str(err.value) and "register_renderer" in str(err.value)
    pytest.importorskip("gymnasium")
    host, _ = envs.make("gymnasium/CartPole-v1")
    with pytest.raises(ValueError, match="^cannot draw recorded states of CartPole-v1: a GymnasiumEnv's state") as err:
        video.find_renderer(host)  # recorded states: a gymnasium env draws itself while its episode is played
    assert "\n" not in str(err.value) and "write_episode_videos" in str(err.value)


def test_a_gymnasium_envs_video_is_the_episode_evaluate_plays_drawn_state_by_state(tmp_path, monkeypatch):
    """A host env draws itself while its episode is played from Python with evaluate's own steps: each run's video
    has evaluate's return for its key (a stochastic policy, so the policy's keys are evaluate's too), and its
    frames are those of a gymnasium CartPole made with render_mode="rgb_array", reset with the seed the video's env
    got and stepped with the same actions: the states acted on, s_0 ... s_{L-1}, then s_L, the state the episode
    ended in (drawn in its last step, before the vector env's same-step reset; rows under the label compared)."""
    gymnasium = pytest.importorskip("gymnasium")
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("pygame")
    from jaxrl_rollout.envs.gymnasium import GymnasiumEnv

    env, _ = envs.make("gymnasium/CartPole-v1")
    policy_fn, params = mlp_policy(jax.random.key(1))
    params = jax.tree.map(lambda x: jnp.stack([x, 3 * x]), params)  # two runs of different policies
    keys = jax.random.split(jax.random.key(5), 2)
    drawn = []  # (seed, [actions]) of every env opened to draw

    def host_open(self, seeds, opened=GymnasiumEnv._host_open):
        if self._drawing:
            drawn.append((int(seeds.item()), []))
        return opened(self, seeds)

    def host_step(self, action, stepped=GymnasiumEnv._host_step):
        if self._drawing:
            drawn[-1][1].append(int(action.item()))
        return stepped(self, action)

    monkeypatch.setattr(GymnasiumEnv, "_host_open", host_open)
    monkeypatch.setattr(GymnasiumEnv, "_host_step", host_step)
    label, widest = video._label, []  # the label every block of frames is broken as (the episode's widest)
    monkeypatch.setattr(video, "_label", lambda frames, given, **kwargs: widest.append(kwargs.get("widest")) or label(
        frames, given, **kwargs))

    class Sink:  # a logger that takes the frames
        def __init__(self):
            self.got = []

        def log_video(self, run, clip, frames, update):
            self.got.append((run, clip, frames, update))

    sink = Sink()
    record = video.TrainingVideos(tmp_path, env, None, policy_fn, lambda state: state, keys, every=2, runs="all",
                                  sinks=[sink])
    assert record(params, 1) == [] and not drawn
    clips = record(params, 2)
    assert [c.run for c in clips] == [0, 1] and [g[0] for g in sink.got] == [0, 1] and len(drawn) == 2
    one = jax.jit(lambda p, k: jr.evaluate(env, None, policy_fn, p, k, 1).returns[0])
    for r, (clip, (seed, actions)) in enumerate(zip(clips, drawn)):
        key = jax.random.fold_in(keys[r], 2)  # TrainingVideos' key of run r at update 2
        assert clip.episode_return == float(one(jax.tree.map(lambda x: x[r], params), key))
        assert clip.length == len(actions) == clip.episode_return  # CartPole pays 1 a step
        assert clip.path == tmp_path / video.video_name(f"update2_run{r}", clip.episode_return)
        reference = gymnasium.make("CartPole-v1", render_mode="rgb_array")
        reference.reset(seed=seed)
        expected = [reference.render()]
        for action in actions:
            *_, terminated, truncated, _ = reference.step(action)
            expected.append(reference.render())
        assert terminated and not truncated  # the pole fell: the last frame is past the angle, not a new episode's
        reference.close()
        frames = sink.got[r][2]
        assert frames.shape == (len(actions) + 1, *expected[0].shape)
        np.testing.assert_array_equal(frames[:, 60:], np.stack(expected)[:, 60:])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(c.path.name for c in clips)  # no hidden files left
    assert drawn[0][1] != drawn[1][1]
    assert set(widest) == {f"run{r}  update 2  t=888  return=-8888.8" for r in (0, 1)}  # time limit 500
    assert not env._drawing and env._render_env_fn is not None  # drawing ends with the videos
    # a bound on the steps, as evaluate's: the episode stops there, its frames too
    (short,) = video.write_episode_videos(tmp_path / "short", env, None, policy_fn, params, keys, "1", max_steps=5)
    bounded = jr.evaluate(env, None, policy_fn, jax.tree.map(lambda x: x[1], params), keys[1], 1, max_steps=5)
    assert (short.length, short.episode_return) == (5, float(bounded.returns[0])) == (int(bounded.lengths[0]), 5.0)
    assert iio.imread(short.path).shape[0] == 6  # s_0 ... s_5: the state the bound stopped the episode at


def test_a_gymnasium_video_ends_on_the_state_a_time_limit_truncated_its_episode_at(tmp_path, monkeypatch):
    """The vector env resets a sub-env in the step that ends its episode (same-step auto-reset), so the state the
    episode ended in is drawn within that step: here a time limit of 5 steps truncates Pendulum's episode, in an
    `AsyncVectorEnv` (whose worker processes make the drawing env), and the video's 6 frames are a reference
    Pendulum's s_0 ... s_5 for the same seed and actions (the last frame was a new episode's first, or missing)."""
    gymnasium = pytest.importorskip("gymnasium")
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("pygame")
    from jaxrl_rollout.envs.gymnasium import GymnasiumEnv

    env, _ = envs.make("gymnasium/Pendulum-v1", asynchronous=True, max_episode_steps=5)
    seeds, actions = [], []

    def host_open(self, seeds_, opened=GymnasiumEnv._host_open):
        seeds.append(int(seeds_.item()))
        return opened(self, seeds_)

    def host_step(self, action, stepped=GymnasiumEnv._host_step):
        actions.append(np.array(action.reshape(-1)))
        return stepped(self, action)

    monkeypatch.setattr(GymnasiumEnv, "_host_open", host_open)
    monkeypatch.setattr(GymnasiumEnv, "_host_step", host_step)
    policy_fn = jr.policies.uniform_random_policy(env.action_space())
    keys = jax.random.split(jax.random.key(4), 1)
    ((clip, frames),) = video._episode_writer(env, None, policy_fn, label=False).write(
        tmp_path, jnp.zeros((1,)), keys, "0", keep_frames=True)  # the frames the file was encoded from
    assert clip.length == len(actions) == 5
    reference = gymnasium.make("Pendulum-v1", render_mode="rgb_array", max_episode_steps=5)
    reference.reset(seed=seeds[-1])
    expected = [reference.render()]
    for action in actions:
        *_, terminated, truncated, _ = reference.step(action)
        expected.append(reference.render())
    reference.close()
    assert truncated and not terminated
    np.testing.assert_array_equal(frames, np.stack(expected))
    assert frames.shape == (6, *expected[0].shape) and iio.imread(clip.path).shape[0] == 6


def test_a_gymnasium_render_that_fails_on_the_final_state_says_so_as_any_failed_render(tmp_path):
    """The final state is drawn inside the step that ended the episode (before the pool's reset): a render that
    raises there is the same one-line `cannot draw` error as a render between steps, not a failure of the env's
    step."""
    gymnasium = pytest.importorskip("gymnasium")
    pytest.importorskip("imageio.v3")
    pytest.importorskip("pygame")
    from jaxrl_rollout.envs.gymnasium import GymnasiumEnv

    class NoFallenPole(gymnasium.Wrapper):
        def render(self):
            if abs(self.env.unwrapped.state[2]) > 0.2095:  # past the angle that ends the episode
                raise RuntimeError("no frame of a fallen pole")
            return self.env.render()

    def drawing():
        return NoFallenPole(gymnasium.make("CartPole-v1", render_mode="rgb_array"))

    env = GymnasiumEnv(lambda: gymnasium.make("CartPole-v1"), render_env_fn=drawing)
    policy_fn = jr.policies.uniform_random_policy(env.action_space())
    keys = jax.random.split(jax.random.key(0), 1)
    with pytest.raises(ValueError, match=r"^cannot draw CartPole-v1: its render\(\) in render_mode='rgb_array' "
                                         r"raised RuntimeError: no frame of a fallen pole \(in render, .*test_video"):
        video.write_episode_videos(tmp_path, env, None, policy_fn, jnp.zeros((1,)), keys, "0")
    assert not list(tmp_path.rglob("*.mp4"))  # no video, and no hidden file left


def test_a_gymnasium_env_without_a_way_to_draw_says_how_to_give_one(tmp_path):
    gymnasium = pytest.importorskip("gymnasium")
    pytest.importorskip("pygame")
    from jaxrl_rollout.envs.gymnasium import GymnasiumEnv

    plain = GymnasiumEnv(lambda: gymnasium.make("CartPole-v1"))
    with pytest.raises(ValueError, match="^cannot draw CartPole-v1: its envs are made without render_mode='rgb_array'"
                       ) as err:
        video.check_recordable(plain)
    assert "render_env_fn=lambda: gymnasium.make(ID, render_mode='rgb_array'" in str(err.value)
    # envs that draw only when asked: env_fn itself draws the videos, and trains as it is
    video.check_recordable(GymnasiumEnv(lambda: gymnasium.make("CartPole-v1", render_mode="rgb_array")))
    made = []  # a passed check is not made again (`evaluate --video` checks before anything runs, then writes)
    drawable = GymnasiumEnv(lambda: gymnasium.make("CartPole-v1"),
                            render_env_fn=lambda: made.append(1) or gymnasium.make("CartPole-v1", render_mode="rgb_array"))
    video.check_recordable(drawable)
    video.check_recordable(drawable)
    assert len(made) == 1
    undrawable = GymnasiumEnv(lambda: gymnasium.make("CartPole-v1"), render_env_fn=lambda: gymnasium.make("CartPole-v1"))
    for _ in range(2):  # a failed check fails again
        with pytest.raises(ValueError, match="render_env_fn made an env with render_mode=None"):
            video.check_recordable(undrawable)
    with pytest.raises(TypeError, match="^render_env_fn must be a callable"):
        GymnasiumEnv(lambda: gymnasium.make("CartPole-v1"), render_env_fn="rgb_array")


def test_envpool_cannot_draw_and_says_so_in_one_line():
    pytest.importorskip("envpool")
    pool, _ = envs.make("envpool/CartPole-v1")
    with pytest.raises(ValueError, match="^cannot render CartPole-v1: EnvpoolEnv is a host env .*envpool renders "
                       "nothing; its videos show the observations where they are images, as Atari's are, and this "
                       "env's are not") as err:
        video.check_recordable(pool)
    assert "\n" not in str(err.value)


def test_envpool_atari_videos_show_the_frames_the_agent_sees(tmp_path, monkeypatch):
    """envpool renders nothing, but an Atari env's observation is the picture: its video's frame t is the newest
    plane of the observation the policy acts on at t (the reset's, then each step's), in grey, 4 x 4 pixels for each
    of its 84 x 84; the episode and its return are evaluate's for the key. The sinks (TensorBoard, W&B) get its
    first `KEPT_FRAMES` frames, the file all: an untrained policy's Atari game runs to its 27,000-step limit, whose
    frames the sinks' copy, held whole in memory, would hold 9 GB of."""
    pytest.importorskip("envpool")
    iio = pytest.importorskip("imageio.v3")
    from jaxrl_rollout.envs.envpool import EnvpoolEnv

    env, _ = envs.make("envpool/Breakout-v5")
    seen = []  # the observations of the last pool opened, as the env gives them (channels last)

    def host_open(self, seeds, opened=EnvpoolEnv._host_open):
        obs = opened(self, seeds)
        seen[:] = [obs]
        return obs

    def host_step(self, action, stepped=EnvpoolEnv._host_step):
        out = stepped(self, action)
        seen.append(out[0])
        return out

    monkeypatch.setattr(EnvpoolEnv, "_host_open", host_open)
    monkeypatch.setattr(EnvpoolEnv, "_host_step", host_step)
    policy_fn = jr.policies.uniform_random_policy(env.action_space())
    got = []

    class Sink:
        def log_video(self, run, clip, frames, update):
            got.append((clip, frames))

    keys = jax.random.split(jax.random.key(3), 1)
    record = video.TrainingVideos(tmp_path, env, None, policy_fn, lambda state: state, keys, every=1, sinks=[Sink()],
                                  max_steps=40)
    monkeypatch.setattr(video, "KEPT_FRAMES", 30)  # the sinks get the first ones of a long episode, the file all
    assert len(record(jnp.zeros((1,)), 1)) == 1  # params with a runs axis (the random policy reads none)
    ((clip, frames),) = got
    evaluated = jr.evaluate(env, None, policy_fn, jnp.zeros(()), jax.random.fold_in(keys[0], 1), 1, max_steps=40)
    assert (clip.length, clip.episode_return) == (int(evaluated.lengths[0]), float(evaluated.returns[0]))
    # frames of the reset's and each step's observation, the last step's too (where the episode, bound here, ends)
    assert frames.shape == (30, 336, 336, 3) and len(seen) == clip.length + 1 == 41
    assert iio.imread(clip.path).shape == (41, 336, 336, 3)
    newest = np.stack([obs.reshape(84, 84, 4)[..., -1] for obs in seen[:30]])
    expected = np.repeat(np.repeat(newest, 4, axis=1), 4, axis=2)
    for channel in range(3):
        np.testing.assert_array_equal(frames[:, 60:, :, channel], expected[:, 60:])
    assert len(np.unique(newest.reshape(len(newest), -1), axis=0)) > 1  # the picture moves
    assert clip.path.exists()


def test_a_gymnasium_run_records_videos_in_training_and_in_evaluate(tmp_path, monkeypatch, caplog, capsys):
    """`train --env gymnasium/... --video-every N` and `evaluate --video`, as a user types them (a relative folder):
    each video decodes to one frame per step of its episode, and its name gives the episode's return. A video that
    takes long says so on stderr (here: at once), with the option that shortens it."""
    imageio = pytest.importorskip("imageio.v3")
    pytest.importorskip("pygame")
    pytest.importorskip("gymnasium")
    from jaxrl_rollout import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(video, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(video, "PROGRESS_EVERY_S", 1e9)
    assert cli.main(["train", "--env", "gymnasium/CartPole-v1", "--seeds", "2", "--num-envs", "2", "--num-steps", "16",
                     "--total-steps", "256", "--chunk-updates", "4", "--num-eval", "1", "--tensorboard", "false",
                     "--video-every", "4", "--out", "runs/gym"]) == 0
    progress = r"  video of seed0, update {}: \d+ frames drawn and encoded in \d+ s, of an episode of at most 500 " \
               r"steps \(--video-max-steps N ends it sooner\)\n"
    err = capsys.readouterr().err
    assert re.search(progress.format(4), err) and re.search(progress.format(8), err), err
    assert cli.main(["evaluate", "runs/gym", "--video", "--runs", "best,worst", "--num-episodes", "2"]) == 0
    assert re.search(progress.format(8), capsys.readouterr().err)
    training = sorted(p.name for p in (tmp_path / "runs/gym/videos/training").iterdir())
    assert [re.sub(r"return-?\d+\.\d", "return*", n) for n in training] == [
        "update4_seed0_return*.mp4", "update8_seed0_return*.mp4"]
    evaluated = sorted(p.name for p in (tmp_path / "runs/gym/videos").glob("*.mp4"))
    assert [re.sub(r"return-?\d+\.\d", "return*", n) for n in evaluated] == [
        "update8_evalseed0_seed0_return*.mp4", "update8_evalseed0_seed1_return*.mp4"]
    for path in [*(tmp_path / "runs/gym/videos/training").iterdir(), *(tmp_path / "runs/gym/videos").glob("*.mp4")]:
        steps = float(re.search(r"return([\d.]+)\.mp4", path.name).group(1))  # CartPole pays 1 a step
        assert imageio.imread(path, plugin="FFMPEG").shape[0] == steps + 1  # the state it ended in too
    assert not list((tmp_path / "runs/gym/videos").rglob(".*"))  # no hidden file left behind

    # SIGTERM while a video's episode is played: raised inside the host env's step (its io_callback runs on the
    # main thread), it comes out of JAX as a runtime error and out of --video as one line; it is still reported as
    # the interruption it is (exit 143), and the video's temporary file is removed
    import signal

    from jaxrl_rollout.envs.gymnasium import GymnasiumEnv

    steps = []

    def host_step(self, action, stepped=GymnasiumEnv._host_step):
        if self._drawing:
            steps.append(1)
            if len(steps) == 5:
                os.kill(os.getpid(), signal.SIGTERM)
        return stepped(self, action)

    def left_alone(signum, frame):  # the signal's default would end this test process: a plain failure instead
        raise AssertionError("evaluate left SIGTERM to the handler it found")

    monkeypatch.setattr(GymnasiumEnv, "_host_step", host_step)
    before = sorted((tmp_path / "runs/gym/videos").iterdir())
    previous = signal.signal(signal.SIGTERM, left_alone)
    try:
        assert cli.main(["evaluate", "runs/gym", "--video", "--seed", "1", "--runs", "0"]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "io_callback failed" not in caplog.text  # JAX's traceback of the interrupted step: dropped
    assert sorted((tmp_path / "runs/gym/videos").iterdir()) == before


# ---- every suite's hook ----


@pytest.mark.parametrize("name", ["Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"])
def test_gymnax_classic_control(name):
    pytest.importorskip("pygame")
    env, params = gymnax.make(name)
    rec, states = random_episode(env, params, 4)
    assert_frames(video.render_frames(env, params, states), 4)


def test_gymnax_minatar():
    env, params = gymnax.make("Breakout-MinAtar")
    rec, states = random_episode(env, params, 6, key=1)
    frames = video.render_frames(env, params, states)
    assert_frames(frames, int(rec.lengths[0]))
    assert frames.shape[1:] == (160, 160, 3)


def test_brax_renders_headless():
    pytest.importorskip("brax")
    env, params = envs.make("brax/inverted_pendulum")
    frames = video.render_frames(env, params, reset_states(env, params, 3))
    assert_frames(frames, 3)


def test_mujoco_draws_a_shadow_map_sized_to_the_frame(monkeypatch):
    """MuJoCo's 4096 x 4096 shadow map, drawn for every frame by a software OpenGL, cost brax's ant half its
    frame time at 320 x 240: the map is drawn at 4 texels per pixel of the frame's longer side, on a copy."""
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><visual><global offwidth='1280'/></visual><worldbody><light pos='0 0 3' castshadow='true'/>"
        "<geom type='plane' size='2 2 .1'/><body pos='0 0 .5'><freejoint/><geom type='sphere' size='.1'/></body></worldbody></mujoco>")
    assert model.vis.quality.shadowsize == 4096
    made, renderer = [], mujoco.Renderer

    def recording(mj_model, **kwargs):
        made.append(int(mj_model.vis.quality.shadowsize))
        return renderer(mj_model, **kwargs)

    monkeypatch.setattr(mujoco, "Renderer", recording)
    qpos = np.tile(np.array([0, 0, .5, 1, 0, 0, 0], np.float64), (2, 1))
    frames = video.render_mujoco(model, qpos, height=48, width=64)
    assert frames.shape == (2, 48, 64, 3) and frames.dtype == np.uint8 and frames.std() > 0
    assert made == [4 * 64] and model.vis.quality.shadowsize == 4096  # the caller's model is not changed
    video.render_mujoco(model, qpos, height=480, width=1280)  # a map finer than the model's: the model's
    assert made[1:] == [4096]


def test_mujoco_without_opengl_says_what_is_needed():
    pytest.importorskip("mujoco")
    code = textwrap.dedent(
        """
        import mujoco, numpy as np
        from jaxrl_rollout import video
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom type='sphere' size='.1'/></worldbody></mujoco>")
        try:
            video.render_mujoco(model, np.zeros((2, 0)))
        except RuntimeError as err:
            print("ERROR", err)
        """
    )
    # GLX needs an X display; with none, MuJoCo cannot make a context
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "MUJOCO_GL": "glx"})
    lines = [line for line in out.stdout.splitlines() if line.startswith("ERROR")]
    assert len(lines) == 1 and "MUJOCO_GL=egl" in lines[0] and "with MUJOCO_GL=glx it failed" in lines[0], out


def test_jumanji():
    pytest.importorskip("jumanji")
    env, params = envs.make("jumanji/Snake-v1", num_rows=6, num_cols=6)
    rec, states = random_episode(env, params, 3, key=2)
    assert int(rec.lengths[0]) >= 2
    assert_frames(video.render_frames(env, params, states), int(rec.lengths[0]))


def test_pgx():
    pytest.importorskip("pgx")
    env, params = envs.make("pgx/tic_tac_toe")
    policy_fn = envs.pgx.masked_categorical_policy(
        lambda p, obs: (jnp.zeros(obs.shape[:1] + (env.num_actions,)), jnp.zeros(obs.shape[:1]))
    )
    rec = video.record_episodes(env, params, policy_fn, None, jax.random.key(0), 1, max_steps=3)
    assert_frames(video.render_frames(env, params, video.episode_states(rec, 0)), int(rec.lengths[0]))


def test_craftax():
    pytest.importorskip("craftax")
    env, params = envs.make("craftax/Craftax-Classic-Symbolic-v1")
    assert_frames(video.render_frames(env, params, reset_states(env, params)), 2)


def test_xminigrid():
    pytest.importorskip("xminigrid")
    env, params = envs.make("xminigrid/MiniGrid-Empty-5x5")
    rec, states = random_episode(env, params, 4, key=2)
    assert_frames(video.render_frames(env, params, states), int(rec.lengths[0]))


@pytest.mark.skipif(not PYTHON_OK, reason="navix 4 needs Python >= 3.12 (CI runs this under .venv-navix)")
def test_navix():
    env, params = envs.make("navix/Navix-Empty-5x5-v0")
    rec, states = random_episode(env, params, 4)
    assert_frames(video.render_frames(env, params, states), int(rec.lengths[0]))

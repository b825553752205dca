"""The built-in render hooks of `jaxrl_rollout.video`, one per suite.

Every hook has the signature of `jaxrl_rollout.video.RenderFn`:
`hook(env, env_params, states) -> uint8 [T, H, W, 3]`, where `env` is the
suite's adapter (or gymnax env) and `states` its states with a leading time
axis T, as numpy or jax arrays. Each imports its suite, and whatever draws it,
only when called, so importing this module imports no suite.

`BUILTIN` maps (module, class name) of an env class, or of any base class of
it, to its hook; `jaxrl_rollout.video.find_renderer` reads it without
importing the suites. Module prefixes ending in "." match every class of the
package (the gymnax families, whose envs are one class each).

The drawing: gymnax classic control with gymnasium's own classic-control
renderer (pygame surfaces, no display needed); MinAtar as its observation
channels in a colour per channel; brax (and any MuJoCo model, `render_mujoco`)
with MuJoCo's `Renderer` on a headless OpenGL (EGL); jumanji with each env's
matplotlib viewer in its "rgb_array" mode; pgx as its SVG drawn by cairosvg;
craftax with its pixel renderer; xminigrid with its rgb renderer; navix with
`navix.observations.rgb` of the full grid.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np

from jaxrl_rollout import _extras

__all__ = ["BUILTIN", "builtin_for", "render_mujoco"]


def _time_slice(states: Any, t: int) -> Any:
    """The state at time `t` of a pytree with leaves [T, ...]."""
    import jax

    return jax.tree.map(lambda x: x[t], states)


def _num_steps(states: Any) -> int:
    import jax

    return int(np.shape(jax.tree.leaves(states)[0])[0])


def _rgb(frames: Any) -> np.ndarray:
    """uint8 [T, H, W, 3] from RGB or RGBA frames, in [0, 255] (ints) or [0, 1] (floats)."""
    frames = np.asarray(frames)
    if np.issubdtype(frames.dtype, np.floating):
        scale = 255.0 if frames.size and frames.max() <= 1.0 else 1.0
        frames = np.clip(np.rint(frames * scale), 0, 255)
    if frames.dtype == np.uint8 and frames.shape[-1:] == (3,) and frames.flags.writeable:
        return frames  # already what is asked for (a stack of the hook's own frames): not copied again
    return frames[..., :3].astype(np.uint8)


# ---- gymnax: classic control and MinAtar ----


def quiet_pygame() -> None:
    """Sets pygame up to draw quietly and headless before it is imported or initialised (a value already set is
    kept): no greeting on stdout when gymnasium imports it, and no ALSA complaints on a machine without sound
    (gymnasium's renderers call `pygame.init()`, which opens the sound too)."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def import_pygame(name: str) -> None:
    """Imports pygame, quietly and headless, for drawing gymnax's env `name`; a `MissingExtra` naming the video extra
    otherwise (gymnasium's renderer draws with pygame, and without it gymnasium would name its own extra, not ours)."""
    quiet_pygame()
    try:
        import pygame  # noqa: F401
    except ImportError as err:
        raise _extras.missing(f"drawing gymnax's {name}", "video", f"pygame could not be imported: {err}") from err


def render_gymnax_classic(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """CartPole, Pendulum, Acrobot, MountainCar(+Continuous) with gymnasium's classic-control renderer.

    One gymnasium env (render_mode "rgb_array") takes the gymnax params and,
    frame by frame, the gymnax state (gymnax's own `vis_gym` mapping).
    """
    from gymnax.visualize import vis_gym

    name = env.name
    if name not in vis_gym.SUPPORTED_GYM_ENVS:
        raise ValueError(
            f"gymnax env {name!r} has no video renderer; gymnax classic control renders "
            f"{', '.join(vis_gym.SUPPORTED_GYM_ENVS)} (register one with jaxrl_rollout.video.register_renderer)."
        )
    import gymnasium

    import_pygame(name)
    gym_env = gymnasium.make(name, render_mode="rgb_array")
    try:
        gym_env.reset(seed=0)
        unwrapped = gym_env.unwrapped
        vis_gym.set_gym_params(unwrapped, name, env_params)
        frames = []
        for t in range(_num_steps(states)):
            state = _time_slice(states, t)
            unwrapped.state = vis_gym.get_gym_state(state, name)
            if name == "Pendulum-v1":
                unwrapped.last_u = float(np.asarray(state.last_u))
            frames.append(gym_env.render())
    finally:
        gym_env.close()
    return _rgb(np.stack(frames))


# A MinAtar cell is this many pixels on a side (a 10 x 10 board gives 160 x 160 frames).
MINATAR_CELL = 16


def render_minatar(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """MinAtar boards: each observation channel in its own colour (the last set channel wins), black elsewhere."""
    import jax
    from matplotlib import colormaps

    obs = np.asarray(jax.jit(jax.vmap(lambda s: env.get_obs(s, env_params)))(states))  # [T, 10, 10, C]
    num_channels = obs.shape[-1]
    palette = colormaps["cubehelix"](np.linspace(0.2, 0.9, num_channels))[:, :3]
    palette = np.concatenate([np.zeros((1, 3)), palette])  # index 0: an empty cell
    index = np.max(obs.astype(bool) * (np.arange(num_channels) + 1), axis=-1)
    frames = palette[index]  # [T, 10, 10, 3] in [0, 1]
    frames = np.repeat(np.repeat(frames, MINATAR_CELL, axis=1), MINATAR_CELL, axis=2)
    return _rgb(frames)


# ---- brax and MuJoCo ----

_GL_HELP = (
    "MuJoCo rendering needs an OpenGL context: set MUJOCO_GL=egl (a GPU or Mesa's EGL, e.g. Debian's libegl1 "
    "libgl1-mesa-dri) or MUJOCO_GL=osmesa (libosmesa6) before importing mujoco or brax, or run with a display"
)


def _headless_egl() -> bool:
    """Switches MuJoCo's GL backend to EGL when it defaulted to GLFW on a machine without a display.

    MuJoCo chooses its backend from MUJOCO_GL when it is imported, and with
    MUJOCO_GL unset it picks GLFW, which needs a display. Where MUJOCO_GL is
    unset and there is no display, this points MuJoCo's context class at its
    EGL one (the module attribute `mujoco.Renderer` reads when it is built);
    guarded, so a MuJoCo release that moves it only loses this convenience.

    Returns:
      Whether the backend was switched (False: left as it was).
    """
    if os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return False
    if os.environ.get("PYOPENGL_PLATFORM", "egl") != "egl" or "OpenGL" in sys.modules:
        return False
    try:
        from mujoco import egl
        from mujoco.rendering.classic import gl_context

        gl_context.GLContext = egl.GLContext
    except Exception:  # noqa: BLE001 -- the caller then reports what is needed
        return False
    os.environ["MUJOCO_GL"] = "egl"
    return True


def _mujoco_renderer(mj_model: Any, height: int, width: int) -> Any:
    """A `mujoco.Renderer` (on EGL where there is no display), or a one-line RuntimeError saying what is needed."""
    import mujoco

    _headless_egl()  # before any try: a failed GLFW start can leave MuJoCo unable to start another backend
    try:
        return mujoco.Renderer(mj_model, height=height, width=width)
    except Exception as err:  # noqa: BLE001 -- GLFW, EGL and OSMesa each fail their own way
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        backend = os.environ.get("MUJOCO_GL") or "glfw (MUJOCO_GL unset)"
        raise RuntimeError(f"{_GL_HELP}; with MUJOCO_GL={backend} it failed: {reason}") from err


# The shadow map's side, in texels per pixel of the frame's longer side. MuJoCo's default map is 4096 x 4096,
# which a software OpenGL (Mesa's llvmpipe, the headless EGL of a machine without a GPU) draws for every frame:
# brax's ant took 50 ms a frame at 320 x 240 with it and 22 ms with a 1024 map, its frames differing by 0.1 of 255
# on average (shadow edges only). At 4 texels per pixel the map stays finer than the frame it is seen in.
SHADOW_TEXELS_PER_PIXEL = 4


def render_mujoco(
    mj_model: Any, qpos: Any, qvel: Any = None, *, height: int = 240, width: int = 320, camera: Any = None
) -> np.ndarray:
    """Frames of a MuJoCo model at the joint positions `qpos` [T, nq], drawn on the host.

    The hook for brax, and the helper for any MuJoCo or MJX env: register
    `lambda env, params, states: render_mujoco(model, states.qpos)` for it.

    Args:
      mj_model: the `mujoco.MjModel`.
      qpos: [T, nq] joint positions; qvel: [T, nv] velocities, or None.
      height, width: the frame size in pixels (at most the model's offscreen
        buffer, 640 x 480 unless the model sets `<visual><global offwidth>`).
      camera: a camera name or id; None: the model's "track" camera if it
        has one, else MuJoCo's free camera.

    The shadow map is drawn at most `SHADOW_TEXELS_PER_PIXEL` times the
    frame's longer side (a copy of `mj_model` is drawn when that is less than
    the model's own `vis.quality.shadowsize`; `mj_model` is left as it is).

    Returns:
      uint8 [T, height, width, 3].

    Raises:
      RuntimeError: no OpenGL context can be made (the message says what is
        needed: MUJOCO_GL=egl or osmesa, or a display).
    """
    import mujoco

    qpos = np.asarray(qpos)
    shadows = SHADOW_TEXELS_PER_PIXEL * max(height, width)
    if mj_model.vis.quality.shadowsize > shadows:
        import copy

        mj_model = copy.copy(mj_model)  # an independent MjModel (mj_copyModel)
        mj_model.vis.quality.shadowsize = shadows
    if camera is None:
        camera = "track" if mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0 else -1
    renderer = _mujoco_renderer(mj_model, height, width)
    try:
        data = mujoco.MjData(mj_model)
        frames = []
        for t in range(qpos.shape[0]):
            data.qpos[:] = qpos[t]
            if qvel is not None:
                data.qvel[:] = np.asarray(qvel[t])
            mujoco.mj_forward(mj_model, data)
            renderer.update_scene(data, camera=camera)
            frames.append(renderer.render())
    finally:
        renderer.close()
    return _rgb(np.stack(frames))


def render_brax(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """A `BraxEnv`'s states (`BraxState.brax_state.pipeline_state`) drawn by `render_mujoco` from its `sys.mj_model`."""
    pipeline = states.brax_state.pipeline_state
    qpos = getattr(pipeline, "q", None)
    if qpos is None:
        qpos = pipeline.qpos  # the mjx backend's state is an mjx.Data
    qvel = getattr(pipeline, "qd", None)
    if qvel is None:
        qvel = getattr(pipeline, "qvel", None)
    return render_mujoco(env.brax_env.sys.mj_model, qpos, qvel)


# ---- jumanji, pgx, craftax, xminigrid, navix ----

# jumanji's viewers draw 10 x 10 inch figures (1000 x 1000 pixels); videos are drawn at half that.
JUMANJI_FIGURE_SIZE = (5.0, 5.0)


def render_jumanji(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """A `JumanjiEnv`'s states (`JumanjiState.env_state`) drawn by the jumanji env's matplotlib viewer.

    jumanji envs draw through their viewer (`env._viewer`, a
    `MatplotlibViewer` built for the "human" mode, whose `render(state)`
    returns the frame in "rgb_array" mode); that mode is switched on for the
    call (an Agg canvas, no window), at `JUMANJI_FIGURE_SIZE`, and the figure
    is closed afterwards.
    """
    import matplotlib.pyplot as plt
    from jumanji.viewer import MatplotlibViewer

    raw = env.env
    viewer = getattr(raw, "_viewer", None)
    if not isinstance(viewer, MatplotlibViewer):
        raise ValueError(
            f"jumanji env {type(raw).__name__} has no matplotlib viewer to draw frames with "
            "(register a renderer with jaxrl_rollout.video.register_renderer)."
        )
    saved = viewer._display, viewer.figure_size
    viewer._display, viewer.figure_size = viewer._display_rgb_array, JUMANJI_FIGURE_SIZE
    interactive = plt.isinteractive()
    viewer.close()  # a figure left open keeps its size
    frames = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "FigureCanvasAgg is non-interactive" from the viewer's fig.show()
            for t in range(_num_steps(states)):
                frames.append(np.array(viewer.render(_time_slice(states.env_state, t))))
    finally:
        viewer._display, viewer.figure_size = saved
        viewer.close()
        if interactive:
            plt.ion()
    return _rgb(np.stack(frames))


def import_cairosvg() -> Any:
    """cairosvg, which rasterises pgx's SVG boards; a `MissingExtra` naming the video extra (and the cairo
    library, whose absence is an OSError at the import) otherwise."""
    try:
        import cairosvg
    except (ImportError, OSError) as err:  # OSError: the cairo library itself is missing
        raise _extras.MissingExtra(
            f"rendering pgx games needs cairosvg and the cairo library ({err}); "
            "pip install 'jaxrl-rollout[video]' (and apt install libcairo2 where cairo is missing)"
        ) from err
    return cairosvg


def render_pgx(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """A `PgxEnv`'s games (`PgxState.game`) as pgx's SVG drawings, rasterised by cairosvg."""
    import io

    cairosvg = import_cairosvg()
    from PIL import Image

    frames = []
    for t in range(_num_steps(states)):
        svg = _time_slice(states.game, t).to_svg(color_theme="light")
        png = cairosvg.svg2png(bytestring=svg.encode("utf-8"), background_color="white")
        frames.append(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    return _rgb(np.stack(frames))


def render_craftax(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """A `CraftaxEnv`'s states drawn by craftax's pixel renderer (Classic or full, by the env's module)."""
    import jax

    inner = env.craftax_env
    if type(inner).__module__.startswith("craftax.craftax_classic"):
        from craftax.craftax_classic import constants, renderer
    else:
        from craftax.craftax import constants, renderer
    from jaxrl_rollout.envs.craftax import with_texture_caches

    draw = with_texture_caches(lambda: renderer.make_craftax_pixel_renderer(constants.BLOCK_PIXEL_SIZE_IMG))
    return _rgb(jax.jit(jax.vmap(draw))(states))


def render_xminigrid(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """An `XMiniGridEnv`'s states (xminigrid `TimeStep`s) drawn by xminigrid's rgb renderer."""
    from xminigrid.rendering.rgb_render import render

    params = env.default_params if env_params is None else env_params
    frames = []
    for t in range(_num_steps(states)):
        state = _time_slice(states, t).state
        frames.append(render(np.asarray(state.grid), state.agent, int(params.view_size)))
    return _rgb(np.stack(frames))


def render_navix(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """A `NavixEnv`'s states (navix `Timestep`s) as `navix.observations.rgb` of their full grid."""
    import jax
    import navix

    return _rgb(jax.jit(jax.vmap(lambda timestep: navix.observations.rgb(timestep.state)))(states))


def refuse_host(env: Any, env_params: Any, states: Any) -> np.ndarray:
    """Host envs (gymnasium, envpool) keep their state in the host process: recorded states hold nothing to draw.
    A gymnasium env draws itself while its episode is played (`write_episode_videos`, `TrainingVideos`); envpool
    cannot draw, and its videos show the observations where those are images (`video._ObservationFrames`)."""
    name = getattr(env, "name", type(env).__name__)
    if type(env).__name__ == "GymnasiumEnv":
        raise ValueError(f"cannot draw recorded states of {name}: a GymnasiumEnv's state lives in the host process; "
                         "it draws itself while an episode is played: video.write_episode_videos, "
                         "video.TrainingVideos, jaxrl-rollout evaluate --video.")
    raise ValueError(f"cannot render {name}: {type(env).__name__} is a host env whose state lives in the host "
                     "process, and it has no way to draw its envs (envpool renders nothing; its videos show the "
                     "observations where they are images, as Atari's are, and this env's are not).")


BUILTIN = {
    ("gymnax.environments.classic_control.", None): render_gymnax_classic,
    ("gymnax.environments.minatar.", None): render_minatar,
    ("jaxrl_rollout.envs.brax", "BraxEnv"): render_brax,
    ("jaxrl_rollout.envs.jumanji", "JumanjiEnv"): render_jumanji,
    ("jaxrl_rollout.envs.pgx", "PgxEnv"): render_pgx,
    ("jaxrl_rollout.envs.craftax", "CraftaxEnv"): render_craftax,
    ("jaxrl_rollout.envs.xminigrid", "XMiniGridEnv"): render_xminigrid,
    ("jaxrl_rollout.envs.navix", "NavixEnv"): render_navix,
    ("jaxrl_rollout.envs._host", "HostEnv"): refuse_host,
}


def builtin_for(env_type: type) -> Any:
    """The built-in hook for an env class (its own or a base class's), or None; imports nothing."""
    for cls in env_type.__mro__:
        for (module, name), hook in BUILTIN.items():
            if module.endswith("."):
                if cls.__module__.startswith(module) and cls is env_type:
                    return hook
            elif cls.__module__ == module and cls.__qualname__ == name:
                return hook
    return None

